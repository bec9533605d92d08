# Call 3 (carries .stage/p3: the GGUF joins): run G, the shipped head (v6e) fine-tuned on 32,000 fresh v6 prompts
# answered at T 0.5 (seed 18, 2,500 steps, LR 2e-4) with --feature-noise 0.1 on the first step's target feature.
# Evaluated in call 4, when the eval sets arrive.
source benchmarks/device/env.sh >/dev/null
NAME=g INIT=updraft/heads/smollm2-135m-instruct-eagle3 SEED=18 T=0.5 EXTRA="--feature-noise 0.1" EVAL=0 \
  bash benchmarks/device/head_run.sh

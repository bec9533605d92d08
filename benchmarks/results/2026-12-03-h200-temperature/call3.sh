# Call 3 (carries .stage/p3: the GGUF joins): run D, the shipped head (v6e) fine-tuned on 32,000 fresh v6 prompts
# answered at temperature 0.3 (seed 17, the double-data schedule: 2,500 steps, LR 2e-4), then its own drafts and
# the lookup assist on the six eval sets.
source benchmarks/device/env.sh >/dev/null
NAME=d INIT=updraft/heads/smollm2-135m-instruct-eagle3 SEED=17 T=0.3 bash benchmarks/device/head_run.sh

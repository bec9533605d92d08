# Call 5 (the machine of call 4, at once): run L resumed exactly (--resume), another 560 s.
source benchmarks/device/env.sh >/dev/null
WORK=/tmp/L RUN=resume PROMPT_SET=v6 NUM_PROMPTS=40000 TRAIN_SECONDS=1000 TRAIN_BUDGET=560 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 21 --temperature 0.5" OUT=$OUT/L bash scripts/gpu_train_head.sh 2>&1 \
  | grep -v Warn | grep -v -E "step [0-9]+/[0-9]+ loss" | cut -c1-260 | tail -25

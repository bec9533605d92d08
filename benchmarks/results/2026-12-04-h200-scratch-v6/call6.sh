# Call 6 (the machine of calls 4-5, at once; carries .stage/p4, the eval sets): run L resumed to the end of its
# schedule (--resume), then its own drafts and the default lookup assist on the six eval sets.
source benchmarks/device/env.sh >/dev/null
WORK=/tmp/L RUN=resume PROMPT_SET=v6 NUM_PROMPTS=40000 TRAIN_SECONDS=1000 TRAIN_BUDGET=250 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 21 --temperature 0.5" OUT=$OUT/L bash scripts/gpu_train_head.sh 2>&1 \
  | grep -v Warn | grep -v -E "step [0-9]+/[0-9]+ loss" | cut -c1-260 | tail -12
rm -rf /tmp/L-head && cp -r /tmp/L/head /tmp/L-head && rm -rf /tmp/L-head/checkpoint
NAME=L HEAD=/tmp/L-head EVAL_TIMEOUT=110 bash benchmarks/device/head_eval.sh

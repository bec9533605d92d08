# Call 5 (the machine of call 4, at once): run M resumed exactly (--resume) for TB seconds, then its generated
# sequences packed to come back (benchmarks/device/data_pack.sh: the next session teacher-forces them instead of
# generating again). run.log is printed, not kept: the head (5 files) and the data's parts fill the 8 files a
# call brings back.
source benchmarks/device/env.sh >/dev/null
WORK=/tmp/M RUN=resume PROMPT_SET=v6 NUM_PROMPTS=60000 STEPS=${STEPS:?} BATCH_TOKENS=${BT:?} TRAIN_BUDGET=${TB:?} \
  TOTAL_LIMIT=$(( TB + 20 )) EVAL=0 EXTRA_TRAIN_ARGS="--seed 23 --temperature 0.5 ${XA:-}" OUT=$OUT/M bash scripts/gpu_train_head.sh 2>&1 \
  | grep -v Warn | grep -v -E "step [0-9]+/[0-9]+ loss" | cut -c1-260 | tail -25
rm -f $OUT/M/run.log
WORK=/tmp/M bash benchmarks/device/data_pack.sh

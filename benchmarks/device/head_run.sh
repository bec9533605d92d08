# usage: NAME=c INIT=/tmp/a-head SEED=16 T=0.5 [PROMPTS=32000 STEPS=2500 LR=2e-4 EXTRA="..."] bash benchmarks/device/head_run.sh
# One fine-tune of a draft head on prompt set v6 (scripts/gpu_train_head.sh, RUN=init from INIT, a fixed schedule of
# STEPS), then its own drafts and the default lookup assist on the six eval sets. Sourced env.sh first (GGUF, eval sets).
# Leaves the head at /tmp/$NAME-head (the next run's INIT); brings back $OUT/$NAME/run.log and head/ (config,
# two weight shards, train_state, train_log) and
# $OUT/{noassist,assist}-$NAME/eval_acceptance.json: 8 files, the device tool's most. The data ($WORK/data, ~40 GB
# at 32,000 prompts) is deleted at the end: a machine holds one run's. A CPU dry run of the whole call: TINY=1
# (gpu_train_head.sh's shrunk pipeline) with LIMIT=mt_bench=2,default=1 EVAL_TOKENS=16 EVAL_TIMEOUT=400 and GGUF set.
# Budget: at T 0.5-0.8 generation takes ~120 s and 2,500 steps finish inside TRAIN_BUDGET 440 (~450 s with both
# evaluations); at T 0.3 generation took 141-163 s and 2,500 steps needed TRAIN_BUDGET 545 (451 s of training):
# then only the first evaluation fits the device's 600 s a call (the first one on a fresh machine compiles first).
: "${NAME:?}" "${INIT:?}" "${SEED:?}" "${T:?}" "${GGUF:?exported by benchmarks/device/env.sh}"
mkdir -p /tmp/$NAME
WORK=/tmp/$NAME STEPS=${STEPS:-2500} RUN=init INIT_FROM=$INIT PROMPT_SET=v6 NUM_PROMPTS=${PROMPTS:-32000} \
  TRAIN_BUDGET=${TRAIN_BUDGET:-440} TOTAL_LIMIT=$(( ${TRAIN_BUDGET:-440} + 20 )) EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed $SEED --lr ${LR:-2e-4} --warmup-steps 30 --temperature $T ${EXTRA:-}" \
  OUT=$OUT/$NAME bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(training|data|held-out|engine,|train-draft exit)" | head -12
rm -rf /tmp/$NAME/data /tmp/$NAME-head && cp -r /tmp/$NAME/head /tmp/$NAME-head && rm -rf /tmp/$NAME-head/checkpoint
for kind in noassist assist; do
  flag=""; [ $kind = noassist ] && flag="--ngram-assist 0"
  timeout ${EVAL_TIMEOUT:-120} python benchmarks/eval_acceptance.py --model $GGUF --head /tmp/$NAME-head --num-steps 5 $flag \
    --limit ${LIMIT:-mt_bench=80,default=20} --max-tokens ${EVAL_TOKENS:-256} --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
    --out $OUT/$kind-$NAME > /tmp/$kind-$NAME.log 2>&1; rc=$?
  rm -f $OUT/$kind-$NAME/per_position.png
  if grep -q "^mean accept" /tmp/$kind-$NAME.log; then grep "^mean accept" /tmp/$kind-$NAME.log | sed "s/^/$kind-$NAME: /"
  else echo "$kind-$NAME: exit status $rc (124: past EVAL_TIMEOUT)"; tail -3 /tmp/$kind-$NAME.log; fi
done
grep -E "^mt_bench" /tmp/noassist-$NAME.log

# usage: NAME=c INIT=/tmp/a-head SEED=16 T=0.5 [PROMPTS=32000 STEPS=2500 LR=2e-4 TRAIN_BUDGET=545 EVAL=0 EXTRA="..."]
#        bash benchmarks/device/head_run.sh
# One fine-tune of a draft head on prompt set v6 (scripts/gpu_train_head.sh, RUN=init from INIT, a fixed schedule of
# STEPS); with EVAL=1 then its own drafts and the default lookup assist on the six eval sets (head_eval.sh), else
# evaluate in the next call: NAME=c HEAD=/tmp/c-head bash benchmarks/device/head_eval.sh. Source env.sh first (GGUF;
# the eval sets only for EVAL=1). Leaves the head at /tmp/$NAME-head (the next run's INIT, the next call's HEAD)
# and brings back $OUT/$NAME/run.log and head/ (config, two weight shards, train_state, train_log), with EVAL=1 also
# $OUT/{noassist,assist}-$NAME/eval_acceptance.json: 8 files, the device tool's most. The data ($WORK/data, ~40 GB
# at 32,000 prompts) is deleted at the end: a machine holds one run's. A CPU dry run of the whole call: TINY=1
# (gpu_train_head.sh's shrunk pipeline) with EVAL=1 LIMIT=mt_bench=2,default=1 EVAL_TOKENS=16 EVAL_TIMEOUT=400.
# Budget: generating 32,000 answers took 115-118 s at T 0.5-0.8 on 2026-12-03's machines (2,500 steps then fit
# TRAIN_BUDGET 440, ~450 s with both evaluations) but 153-156 s at T 0.5 on 2026-12-04's (a 440 s budget stopped
# run G at step 1,539) and 141-163 s at T 0.3: TRAIN_BUDGET 545 (the default) lets 2,500 steps finish, and leaves
# no room for the evaluations in the same 600 s call, hence EVAL=0 by default.
: "${NAME:?}" "${INIT:?}" "${SEED:?}" "${T:?}" "${GGUF:?exported by benchmarks/device/env.sh}"
mkdir -p /tmp/$NAME
WORK=/tmp/$NAME STEPS=${STEPS:-2500} RUN=init INIT_FROM=$INIT PROMPT_SET=v6 NUM_PROMPTS=${PROMPTS:-32000} \
  TRAIN_BUDGET=${TRAIN_BUDGET:-545} TOTAL_LIMIT=$(( ${TRAIN_BUDGET:-545} + 20 )) EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed $SEED --lr ${LR:-2e-4} --warmup-steps 30 --temperature $T ${EXTRA:-}" \
  OUT=$OUT/$NAME bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(training|data|held-out|engine,|train-draft exit)" | head -12
rm -rf /tmp/$NAME/data /tmp/$NAME-head && cp -r /tmp/$NAME/head /tmp/$NAME-head && rm -rf /tmp/$NAME-head/checkpoint
[ "${EVAL:-0}" = 1 ] && HEAD=/tmp/$NAME-head bash benchmarks/device/head_eval.sh
true

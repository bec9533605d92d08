# Run N's calls 2-5 (one command for each, back to back on one machine): `TB=540 bash
# benchmarks/results/2026-12-04-h200-v16k-anneal/train.sh`. Calls 2-3 carry .whl and .stage/q2, .stage/q3 (staging
# only); call 4 carries .stage/q4 (the GGUF joins): RUN=init from the shipped head (run M at step 42,980), its draft
# vocabulary grown from 8,192 to 16,384 tokens (--resize-draft-vocab: new rows start at zero), on fresh data (60,000
# prompts of set v6 with seed 29, which run M never saw; answers sampled at T 0.5), one schedule of STEPS steps at
# peak LR 2.5e-4 (run M's was 1.82e-4 at its step 42,980) with cosine to 0.12 of it (3e-5, run M's end: 4e-5),
# compiled, no cuDNN attention; it generates the data and trains for the rest of TB seconds. Call 5 (no stage
# folder) continues it exactly (--resume) on the same machine. Each brings back $OUT/N/head and run.log, and leaves
# the head in /tmp/N-head for final.sh.
# SEED (default 29) picks the prompts and answers (run D: 31, from C-17227, the builtin head then).
# NAME=C VOCAB=8192 (the next session's control, same seed, data, schedule and flags, without growing the
# vocabulary): WORK /tmp/C, $OUT/C, /tmp/C-head. RESUME_FROM=<a head folder a call brought back> continues the
# schedule on a new machine (--resume-from: the data generated again, the optimizer re-warmed).
source benchmarks/device/env.sh >/dev/null
XA=${XA-"--compile --sdpa no-cudnn"}
if [ -f /tmp/use_base ] && [ -d /tmp/base/updraft ]; then
  cp updraft/train/heads.py updraft/train/checkpoint.py /tmp/base/updraft/train/
  printf '#!/bin/sh\nPYTHONPATH=/tmp/base exec python -P "$@"\n' > /tmp/pyb && chmod +x /tmp/pyb
  export PYTHON=/tmp/pyb
  echo "training with the base's code: $(/tmp/pyb -c 'import updraft; print(updraft.__file__)')"
fi
[ -f "$GGUF" ] || { echo "staged so far: $(ls /tmp/c | tr '\n' ' ')"; exit 0; }
NAME=${NAME:-N} VOCAB=${VOCAB:-16384}
WORK=${WORK:-/tmp/$NAME}
SCHED="--seed ${SEED:-29} --temperature 0.5 --lr 2.5e-4 --min-lr-ratio 0.12 $XA"
GROW=""; [ "$VOCAB" != 8192 ] && GROW="--resize-draft-vocab"
if [ -f $WORK/head/checkpoint/state.pt ] && [ -f $WORK/data/sequences.safetensors ]; then
  export RUN=resume RESUME_FROM=/nonexistent EXTRA_TRAIN_ARGS="$SCHED"
elif [ -n "${RESUME_FROM:-}" ]; then  # a new machine: the head folder the last call brought back, carried
  export RUN=resume RESUME_FROM EXTRA_TRAIN_ARGS="$SCHED"
else
  # runs N and C started from M-42980, the builtin head until C replaced it: to replay them, INIT_FROM=<a carried
  # folder with `git show 80f2445:updraft/heads/smollm2-135m-instruct-eagle3/{model.safetensors,config.json}`>
  export RUN=init INIT_FROM="${INIT_FROM:-updraft/heads/smollm2-135m-instruct-eagle3}" EXTRA_TRAIN_ARGS="$SCHED $GROW"
fi
echo "NAME=$NAME VOCAB=$VOCAB XA=$XA RUN=$RUN"
WORK=$WORK PROMPT_SET=v6 NUM_PROMPTS=${NUM_PROMPTS:-60000} STEPS=${STEPS:-18000} BATCH_TOKENS=16384 DRAFT_VOCAB=$VOCAB \
  TRAIN_BUDGET=${TB:?} TOTAL_LIMIT=$(( TB + 25 )) EVAL=0 OUT=$OUT/$NAME bash scripts/gpu_train_head.sh 2>&1 \
  | grep -v Warn | grep -v -E "step [0-9]+/[0-9]+ loss" | cut -c1-260 | tail -25
rm -rf /tmp/$NAME-head && cp -r $WORK/head /tmp/$NAME-head && rm -rf /tmp/$NAME-head/checkpoint

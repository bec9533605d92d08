# Run M continued in a later session (any number of calls, back to back). Staging calls carry .whl and one of
# .stage/q1..q4 (the GGUF's xz parts, benchmarks/device/env.sh), .stage/p5 (run M's generated sequences,
# seq.xz.part-00 (11.0 MB, sha256 cd14262f85c9a4a5), and the eval sets) and .stage/p4 (M-head/: the head folder the
# last call brought back); env.sh joins the GGUF and the sequences under /tmp/c once complete; a call before the
# GGUF is whole stops after staging. Then each call trains for TB seconds: on a fresh /tmp/M the trainer takes the
# weights, schedule and data position from /tmp/M-head (--resume-from: optimizer re-warmed over 50 steps) and
# teacher-forces the carried sequences (~35 s) instead of generating them (~260 s); on the machine of the last
# call it resumes exactly (--resume). Brings back $OUT/M/head (5 files) and run.log. Usage:
#   STEPS=60000 BT=16384 XA="--compile" TB=540 bash benchmarks/results/2026-12-04-h200-scratch-long/resume.sh
source benchmarks/device/env.sh >/dev/null
[ -d .stage/p4/M-head ] && rm -rf /tmp/M-head && cp -r .stage/p4/M-head /tmp/M-head
if [ ! -f "$GGUF" ] || [ ! -f /tmp/c/sequences.safetensors ] || [ ! -d /tmp/M-head ]; then
  echo "staged so far: $(ls /tmp/c | tr '\n' ' ') $(ls -d /tmp/M-head 2>/dev/null)"; exit 0
fi
mkdir -p /tmp/M/data
[ -f /tmp/M/data/sequences.safetensors ] || cp /tmp/c/sequences.safetensors /tmp/M/data/
WORK=/tmp/M RUN=resume RESUME_FROM=/tmp/M-head PROMPT_SET=v6 NUM_PROMPTS=60000 STEPS=${STEPS:?} BATCH_TOKENS=${BT:?} \
  TRAIN_BUDGET=${TB:?} TOTAL_LIMIT=$(( TB + 20 )) EVAL=0 EXTRA_TRAIN_ARGS="--seed 23 --temperature 0.5 ${XA:-}" \
  OUT=$OUT/M bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -v -E "step [0-9]+/[0-9]+ loss" | cut -c1-260 | tail -25
# the next call's --resume-from source if the machine is given back in between
rm -rf /tmp/M-head && cp -r /tmp/M/head /tmp/M-head && rm -rf /tmp/M-head/checkpoint

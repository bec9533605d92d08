# Call 4 (carries .whl and .stage/q4: the GGUF joins): run M, an EAGLE-3 head for the default target from scratch
# on the shipped head's last data recipe (prompt set v6, answers sampled at T 0.5), 60,000 prompts (seed 23), one
# schedule of STEPS steps (planned for several sessions' calls; the trainer's defaults otherwise: peak LR 8e-4,
# 60 warm-up steps, cosine to 5%), BT tokens a batch, XA extra train-draft flags (--compile when call 1 found it
# faster). This call generates the data and trains for the rest of its 545 s; call 5 resumes it exactly.
source benchmarks/device/env.sh >/dev/null
[ -f "$GGUF" ] || { echo "no GGUF yet: $(ls /tmp/c)"; exit 1; }
WORK=/tmp/M RUN=first PROMPT_SET=v6 NUM_PROMPTS=60000 STEPS=${STEPS:?} BATCH_TOKENS=${BT:?} TRAIN_BUDGET=545 \
  TOTAL_LIMIT=570 EVAL=0 EXTRA_TRAIN_ARGS="--seed 23 --temperature 0.5 ${XA:-}" OUT=$OUT/M bash scripts/gpu_train_head.sh 2>&1 \
  | grep -v Warn | grep -v -E "step [0-9]+/[0-9]+ loss" | cut -c1-260 | tail -25

# Call 4 (carries .stage/q4: the GGUF joins; calls 1-3 carried .stage/q1-q3 running
# ../2026-12-04-h200-feature-noise/call1.sh): run L, an EAGLE-3 head for the default target from scratch on the
# shipped head's last data recipe (prompt set v6, answers sampled at T 0.5), 40,000 prompts (seed 21), one
# schedule planned for 1,000 s of training over three calls (the defaults: peak LR 8e-4, 60 warm-up steps,
# cosine to 5%); this call generates the data and trains for the rest of its 555 s. Calls 5-6 resume it exactly
# (--resume: optimizer and data on this machine).
source benchmarks/device/env.sh >/dev/null
WORK=/tmp/L RUN=first PROMPT_SET=v6 NUM_PROMPTS=40000 TRAIN_SECONDS=1000 TRAIN_BUDGET=555 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 21 --temperature 0.5" OUT=$OUT/L bash scripts/gpu_train_head.sh 2>&1 \
  | grep -v Warn | grep -v -E "step [0-9]+/[0-9]+ loss" | cut -c1-260 | tail -25

# Call 3 (carries the third part and the eval sets; the GGUF is joined): the control. The shipped head (v6c)
# fine-tuned once more on prompt set v6 (16,000 fresh prompts, seed 14, answers sampled at T = 0.8), the shipped
# recipe's LR 2e-4, a fixed 2,500 steps, soft labels only (--hard-label-weight 0, the default); then the six eval sets
# from its own drafts (no lookup assist). The data stays in /tmp/updraft-gpu-head/data for the next calls.
R=benchmarks/results/2026-12-03-h200-hard-labels
source benchmarks/device/env.sh >/dev/null
rm -rf /tmp/shipped && cp -r updraft/heads/smollm2-135m-instruct-eagle3 /tmp/shipped
STEPS=2500 RUN=init INIT_FROM=/tmp/shipped PROMPT_SET=v6 NUM_PROMPTS=16000 TRAIN_BUDGET=430 TOTAL_LIMIT=450 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 14 --lr 2e-4 --warmup-steps 30 --temperature 0.8" \
  OUT=$OUT/ctl bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(training|data|held-out|engine,|train-draft exit)" | head -12
rm -rf /tmp/ctl && cp -r /tmp/updraft-gpu-head/head /tmp/ctl && rm -rf /tmp/ctl/checkpoint
timeout 70 python benchmarks/eval_acceptance.py --model $GGUF --head /tmp/ctl --num-steps 5 --ngram-assist 0 \
  --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
  --out $OUT/noassist-ctl > $OUT/noassist-ctl.log 2>&1
grep -E "^(mean accept|mt_bench|humaneval|gsm8k|alpaca|sum|qa)" $OUT/noassist-ctl.log | head -8; rm -f $OUT/noassist-ctl/per_position.png

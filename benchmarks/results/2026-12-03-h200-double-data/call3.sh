# Call 3 (carries the third part and the eval sets; the GGUF is joined): run A. The shipped head (v6d) fine-tuned
# on prompt set v6 with TWICE the fresh data of the last runs (32,000 prompts, seed 15, answers sampled at T = 0.8)
# and the same schedule (LR 2e-4, warm-up 30, exactly 2,500 steps); then the six eval sets from its own drafts.
R=benchmarks/results/2026-12-03-h200-double-data
source benchmarks/device/env.sh >/dev/null
rm -rf /tmp/shipped && cp -r updraft/heads/smollm2-135m-instruct-eagle3 /tmp/shipped
N=a; mkdir -p /tmp/$N
WORK=/tmp/$N STEPS=2500 RUN=init INIT_FROM=/tmp/shipped PROMPT_SET=v6 NUM_PROMPTS=32000 TRAIN_BUDGET=480 TOTAL_LIMIT=500 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 15 --lr 2e-4 --warmup-steps 30 --temperature 0.8" \
  OUT=$OUT/$N bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(training|data|held-out|engine,|train-draft exit)" | head -12
rm -rf /tmp/$N-head && cp -r /tmp/$N/head /tmp/$N-head && rm -rf /tmp/$N-head/checkpoint
timeout 70 python benchmarks/eval_acceptance.py --model $GGUF --head /tmp/$N-head --num-steps 5 --ngram-assist 0 \
  --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
  --out $OUT/noassist-$N > $OUT/noassist-$N.log 2>&1
grep -E "^(mean accept|mt_bench|humaneval|gsm8k|alpaca|sum|qa)" $OUT/noassist-$N.log | head -8; rm -f $OUT/noassist-$N/per_position.png
rm -rf /tmp/$N/data   # 40+ GB of features; run B generates its own

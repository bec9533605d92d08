# Call 4 (same machine, right after call 3): run A with the lookup assist; then run B: run A's head fine-tuned on
# another 32,000 fresh v6 prompts (seed 16), the same schedule; then run B's own drafts on the six sets.
R=benchmarks/results/2026-12-03-h200-double-data
source benchmarks/device/env.sh >/dev/null
ev() { timeout 60 python benchmarks/eval_acceptance.py --model $GGUF --head $2 --num-steps 5 $3 \
  --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
  --out $OUT/$1 > /tmp/$1.log 2>&1; grep "^mean accept" /tmp/$1.log | sed "s/^/$1: /"; rm -f $OUT/$1/per_position.png; }
ev assist-a /tmp/a-head ""
N=b; mkdir -p /tmp/$N
WORK=/tmp/$N STEPS=2500 RUN=init INIT_FROM=/tmp/a-head PROMPT_SET=v6 NUM_PROMPTS=32000 TRAIN_BUDGET=440 TOTAL_LIMIT=460 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 16 --lr 2e-4 --warmup-steps 30 --temperature 0.8" \
  OUT=$OUT/$N bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(training|data|held-out|engine,|train-draft exit)" | head -12
rm -rf /tmp/$N-head && cp -r /tmp/$N/head /tmp/$N-head && rm -rf /tmp/$N-head/checkpoint
ev noassist-b /tmp/b-head "--ngram-assist 0"
grep -E "^(mt_bench|humaneval|gsm8k|alpaca|sum|qa)" /tmp/noassist-b.log | head -8

# Call 6 (same machine, right after call 5): run C, the control for the answers' temperature: run B's start (run A's
# head), prompts (32,000 v6, seed 16) and schedule, the answers sampled at T = 0.5 instead of 0.8; then its own drafts
# and the lookup assist on the six sets.
R=benchmarks/results/2026-12-03-h200-double-data
source benchmarks/device/env.sh >/dev/null
ev() { timeout 60 python benchmarks/eval_acceptance.py --model $GGUF --head $2 --num-steps 5 $3 \
  --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
  --out $OUT/$1 > /tmp/$1.log 2>&1; grep "^mean accept" /tmp/$1.log | sed "s/^/$1: /"; rm -f $OUT/$1/per_position.png; }
N=c; rm -rf /tmp/b/data; mkdir -p /tmp/$N
WORK=/tmp/$N STEPS=2500 RUN=init INIT_FROM=/tmp/a-head PROMPT_SET=v6 NUM_PROMPTS=32000 TRAIN_BUDGET=440 TOTAL_LIMIT=460 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 16 --lr 2e-4 --warmup-steps 30 --temperature 0.5" \
  OUT=$OUT/$N bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(training|data|held-out|engine,|train-draft exit)" | head -12
rm -rf /tmp/$N-head && cp -r /tmp/$N/head /tmp/$N-head && rm -rf /tmp/$N-head/checkpoint
ev noassist-c /tmp/c-head "--ngram-assist 0"
ev assist-c /tmp/c-head ""

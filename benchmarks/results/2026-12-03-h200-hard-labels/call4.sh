# Call 4 (same machine, right after call 3): the same start, data, seed, steps and LR as the control, with half the
# cross-entropy taken against the target's argmax alone (--hard-label-weight 0.5); then its own drafts on the six sets.
R=benchmarks/results/2026-12-03-h200-hard-labels
source benchmarks/device/env.sh >/dev/null
W=${W:-0.5}; N=h${W/./}
mkdir -p /tmp/$N && rm -rf /tmp/$N/head /tmp/$N/data
# on a fresh machine (call 5b: call 5 found the machine given back) the data is generated anew from the same seed
[ -d /tmp/updraft-gpu-head/data ] && ln -s /tmp/updraft-gpu-head/data /tmp/$N/data
WORK=/tmp/$N STEPS=2500 RUN=init INIT_FROM=/tmp/shipped PROMPT_SET=v6 NUM_PROMPTS=16000 TRAIN_BUDGET=430 TOTAL_LIMIT=450 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 14 --lr 2e-4 --warmup-steps 30 --temperature 0.8 --hard-label-weight $W" \
  OUT=$OUT/$N bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(training|data|held-out|engine,|train-draft exit)" | head -12
rm -rf /tmp/$N-head && cp -r /tmp/$N/head /tmp/$N-head && rm -rf /tmp/$N-head/checkpoint
timeout 70 python benchmarks/eval_acceptance.py --model $GGUF --head /tmp/$N-head --num-steps 5 --ngram-assist 0 \
  --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
  --out $OUT/noassist-$N > $OUT/noassist-$N.log 2>&1
grep -E "^(mean accept|mt_bench|humaneval|gsm8k|alpaca|sum|qa)" $OUT/noassist-$N.log | head -8; rm -f $OUT/noassist-$N/per_position.png

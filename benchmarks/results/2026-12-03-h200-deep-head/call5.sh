# Call 5 (same machine, right after call 4): the shipped head grown to two layers (--head-layers 2: a standard decoder
# layer after the mid layer, starting as the identity) and fine-tuned on call 4's data (same seed, steps and LR);
# then the six eval sets from its own drafts.
R=benchmarks/results/2026-12-03-h200-deep-head
source benchmarks/device/env.sh >/dev/null
mkdir -p /tmp/deep && rm -rf /tmp/deep/head /tmp/deep/data && ln -s /tmp/updraft-gpu-head/data /tmp/deep/data
WORK=/tmp/deep STEPS=2500 RUN=init INIT_FROM=/tmp/shipped PROMPT_SET=v6 NUM_PROMPTS=16000 TRAIN_BUDGET=430 TOTAL_LIMIT=450 EVAL=0 \
  EXTRA_TRAIN_ARGS="--seed 13 --lr 2e-4 --warmup-steps 30 --temperature 0.8 --head-layers 2" \
  OUT=$OUT/deep bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(training|data|held-out|engine,|train-draft exit)" | head -12
rm -rf /tmp/deep2 && cp -r /tmp/deep/head /tmp/deep2 && rm -rf /tmp/deep2/checkpoint
timeout 70 python benchmarks/eval_acceptance.py --model $GGUF --head /tmp/deep2 --num-steps 5 --ngram-assist 0 \
  --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
  --out $OUT/noassist-deep > $OUT/noassist-deep.log 2>&1
grep -E "^(mean accept|mt_bench|humaneval|gsm8k|alpaca|sum|qa)" $OUT/noassist-deep.log | head -8; rm -f $OUT/noassist-deep/per_position.png

# Call 6 (same machine, right after call 5): a second v6 fine-tune from call 4's head (fresh prompts, seed 12),
# then every head of this folder without the lookup assist (--ngram-assist 0: the head alone), no timing runs.
R=benchmarks/results/2026-12-03-h200-free-turns
source benchmarks/device/env.sh >/dev/null
rm -rf /tmp/v6a && cp -r /tmp/updraft-gpu-head/head /tmp/v6a && rm -rf /tmp/v6a/checkpoint
RUN=init INIT_FROM=/tmp/v6a PROMPT_SET=v6 NUM_PROMPTS=16000 TRAIN_BUDGET=390 TRAIN_SECONDS=390 TOTAL_LIMIT=440 \
  EVAL_TIMEOUT=45 EXTRA_TRAIN_ARGS="--seed 12 --lr 2e-4 --warmup-steps 30 --temperature 0.8" \
  OUT=$OUT/v6b bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | grep -E "^(mt_bench|humaneval|gsm8k|alpaca|sum|qa|mean|training|data)" | head -9
rm -f $OUT/v6b/eval/per_position.png
for h in shipped:updraft/heads/smollm2-135m-instruct-eagle3 v6a:/tmp/v6a v6b:/tmp/updraft-gpu-head/head; do
  timeout 40 python benchmarks/eval_acceptance.py --model $GGUF --head ${h#*:} --num-steps 5 --ngram-assist 0 \
    --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
    --out $OUT/noassist-${h%%:*} > $OUT/noassist-${h%%:*}.log 2>&1
  grep "^mean accept" $OUT/noassist-${h%%:*}.log | sed "s/^/${h%%:*} no assist: /"; rm -f $OUT/noassist-${h%%:*}/per_position.png
done

# Call 5 (same machine, right after call 4): the shipped head on the same evaluation, for the side by side
R=benchmarks/results/2026-12-03-h200-free-turns
source benchmarks/device/env.sh >/dev/null
EVAL_ONLY=1 HEAD=updraft/heads/smollm2-135m-instruct-eagle3 TOTAL_LIMIT=150 EVAL_TIMEOUT=120 OUT=$OUT/shipped \
  bash scripts/gpu_train_head.sh 2>&1 | grep -E "^(mt_bench|humaneval|gsm8k|alpaca|sum|qa|mean| )" | head -14
rm -f $OUT/shipped/eval/per_position.png

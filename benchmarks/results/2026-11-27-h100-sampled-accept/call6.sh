# call 6 (the same machine, right after): the shipped head on the same evaluation
source benchmarks/results/2026-11-27-h100-sampled-accept/env.sh
EVAL_ONLY=1 HEAD=updraft/heads/smollm2-135m-instruct-eagle3 TOTAL_LIMIT=200 EVAL_TIMEOUT=180 OUT=$OUT/shipped \
  bash scripts/gpu_train_head.sh 2>&1 | grep -E "^(mt_bench|humaneval|gsm8k|alpaca|sum|qa|mean|           )" | head -20

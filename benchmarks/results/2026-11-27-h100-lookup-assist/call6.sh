# call 6 (a fresh machine): the attention kit on CUDA, its fused-iteration column with the lookup
# assist on (the default) and the sampled graphs captured at start.
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
timeout 420 python -m updraft.cli kit run --device cuda --no-progress --json $OUT/call6-kit.json \
  --out $OUT/attention-matrix-h100.md > $OUT/call6-kit.log 2>&1; tail -3 $OUT/call6-kit.log

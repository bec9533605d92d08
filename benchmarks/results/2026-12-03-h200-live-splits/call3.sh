# Call 3: call 2's best 6-row head QKV config against the shipped one, alternating rounds, bs 1 cycle at 512 tokens.
R=benchmarks/results/2026-12-03-h200-live-splits
source benchmarks/device/env.sh
timeout 150 python benchmarks/cycle_variants.py --bs 1 --rounds 4 --variants base,tiles --tiles-json $R/head_qkv6.json \
  --out $OUT/c512-bs1 > $OUT/c512-bs1.log 2>&1; grep -v Warning $OUT/c512-bs1.log | tail -10

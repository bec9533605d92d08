# Call 1: SmolLM2's bs-8 S = 5 cycle (48-row verify) under the verify block's attention knobs, alternating rounds.
R=benchmarks/results/2026-12-03-h200-verify-window
source benchmarks/device/env.sh
timeout 540 python benchmarks/cycle_variants.py --bs 8 --rounds 2 \
  --variants base,verify_pdl_decode,verify_pdl_merge,verify_pdl+no_prewarm,verify_waves1,merge_in_kernel \
  --out $OUT/bs8 2>&1 | grep -v Warning | tail -20

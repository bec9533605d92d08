# Call 3: the candidates at bs 1, 2, 4 and 8 (S = 5 cycle, alternating rounds), then the GPU attention tests.
R=benchmarks/results/2026-12-03-h200-verify-window
source benchmarks/device/env.sh
for bs in 1 2 4 8; do
  timeout 130 python benchmarks/cycle_variants.py --bs $bs --rounds 2 \
    --variants base,verify_waves1,no_prewarm,verify_pdl_decode+verify_waves1,verify_pdl_decode+verify_waves1+no_prewarm \
    --out $OUT/bs$bs 2>&1 | grep -v Warning | tail -5
done
timeout 120 python -m pytest -m gpu -q tests/attention/test_triton_gpu.py --tb=line 2>&1 | tail -15

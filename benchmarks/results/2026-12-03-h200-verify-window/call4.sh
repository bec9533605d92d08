# Call 4: the shipped settings (one verify wave, the decode kernel's PDL at 41-64 rows, no verify prewarm) against
# the settings before them and against two verify waves alone, at 4k tokens of context (bs 1, 4, 8); then the GPU
# attention tests under the new defaults.
R=benchmarks/results/2026-12-03-h200-verify-window
source benchmarks/device/env.sh
for bs in 1 4 8; do
  timeout 150 python benchmarks/cycle_variants.py --bs $bs --rounds 2 --context 4096 \
    --variants base,verify_waves2+prewarm+verify_pdl_none,verify_waves2 \
    --out $OUT/ctx4k-bs$bs 2>&1 | grep -v Warning | tail -3
done
timeout 150 python -m pytest -m gpu -q tests/attention/test_triton_gpu.py --tb=line 2>&1 | tail -8

# Call 2 (warm, right after call 1): the bs-1 cycle under the same knobs; the whole decode / verify step with the
# decode kernel merging its own splits.
R=benchmarks/results/2026-12-03-h200-verify-window
source benchmarks/device/env.sh
timeout 300 python benchmarks/cycle_variants.py --bs 1 --rounds 3 --variants base,merge_in_kernel,no_prewarm \
  --out $OUT/bs1 2>&1 | grep -v Warning | tail -14
timeout 240 python benchmarks/decode_kernels.py --skip-gemms --models smollm2 --variants fused,fused_merge_in_launch \
  --batch-sizes 1,8 --out $OUT/dk > $OUT/dk.log 2>&1; tail -30 $OUT/dk.log
(cd $OUT && tar czf dk.tgz --remove-files dk)
timeout 200 python benchmarks/cycle_variants.py --bs 8 --rounds 2 \
  --variants base,verify_pdl_decode,verify_pdl_decode+verify_waves1,verify_waves1 \
  --out $OUT/bs8b 2>&1 | grep -v Warning | tail -4

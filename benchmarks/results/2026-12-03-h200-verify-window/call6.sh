# Call 6: decode-kernel programs past the context skipping their body (the skip_empty knob; off as shipped) and one-token
# decode's split waves (4 shipped) at 2 and 8, in the S = 5 cycle; then decode / verify steps with and without the skip.
R=benchmarks/results/2026-12-03-h200-verify-window
source benchmarks/device/env.sh
for bs in 1 8; do
  timeout 110 python benchmarks/cycle_variants.py --bs $bs --rounds 2 --variants base,skip_empty,decode_waves2,decode_waves8 \
    --out $OUT/c512-bs$bs 2>&1 | grep -v Warning | tail -4 | sed "s/^/ctx 512 bs $bs /"
done
timeout 80 python benchmarks/cycle_variants.py --bs 8 --rounds 2 --context 4096 --variants base,skip_empty \
  --out $OUT/c4096-bs8 2>&1 | grep -v Warning | tail -2 | sed "s/^/ctx 4096 bs 8 /"
timeout 120 python benchmarks/step_pair.py --models smollm2 --batch-sizes 1,8 \
  --variants base,skip_empty,base,skip_empty --out $OUT/pair > $OUT/pair.log 2>&1; tail -22 $OUT/pair.log

# Call 6: decode-kernel programs past the context skipping their body (the skip_empty knob; off as shipped), in the
# S = 5 cycle at bs 1 and 8 (512 tokens) and in decode / verify steps alone (1k tokens), alternating rounds.
R=benchmarks/results/2026-12-03-h200-verify-window
source benchmarks/device/env.sh
for bs in 1 8; do
  timeout 90 python benchmarks/cycle_variants.py --bs $bs --rounds 2 --variants base,skip_empty \
    --out $OUT/c512-bs$bs 2>&1 | grep -v Warning | tail -2 | sed "s/^/ctx 512 bs $bs /"
done
timeout 100 python benchmarks/step_pair.py --models smollm2 --batch-sizes 1,8 \
  --variants base,skip_empty,base,skip_empty --out $OUT/pair > $OUT/pair.log 2>&1; tail -22 $OUT/pair.log

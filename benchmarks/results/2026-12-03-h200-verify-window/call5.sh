# Call 5: the final settings ("base": one verify wave up to 12 programs a split, the decode kernel's PDL at 41-64
# rows, no verify prewarm) against main before them ("old" = verify_waves2+prewarm+verify_pdl_none) and against
# the prewarm put back, in the S = 5 cycle (bs 1, 4, 8 at 512 and 4k tokens), then decode / verify steps of both
# models side by side (step_pair.py, 1k tokens, alternating rounds).
R=benchmarks/results/2026-12-03-h200-verify-window
source benchmarks/device/env.sh
OLD=verify_waves2+prewarm+verify_pdl_none
for ctx in 512 4096; do for bs in 1 4 8; do
  timeout 100 python benchmarks/cycle_variants.py --bs $bs --rounds 2 --context $ctx --variants base,$OLD,prewarm \
    --out $OUT/c$ctx-bs$bs 2>&1 | grep -v Warning | tail -3 | sed "s/^/ctx $ctx bs $bs /"
done; done
timeout 200 python benchmarks/step_pair.py --models smollm2,llama8b --batch-sizes 1,8 \
  --variants base,$OLD,prewarm,base,$OLD,prewarm --out $OUT/pair > $OUT/pair.log 2>&1; grep "verify / decode" $OUT/pair.log

# call 5: tokens/s, spec / plain in one run: plain, adaptive, S = 5, adaptive with the sampled
# graphs on first use, adaptive without the assist; then n-gram on sum.
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
timeout 580 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --num-prompts 64 --bs1-prompts 64 --output-len 256 \
  --variants plain,eagle_adaptive,eagle_s5,eagle_adaptive_lazy,eagle_adaptive_noassist --out $OUT/speed > $OUT/call5-speed.log 2>&1
tail -40 $OUT/call5-speed.log; cp $OUT/speed/spec_iteration.json $OUT/run5-spec_iteration-speed.json; rm -r $OUT/speed

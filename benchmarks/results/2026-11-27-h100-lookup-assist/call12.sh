# call 12: tokens/s in one run, plain, adaptive (assist on in greedy and sampled iterations) and
# adaptive without the assist; 32 mt_bench prompts x 256 tokens at bs 1, greedy and T 0.7 (the last device minutes).
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
timeout 560 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --num-prompts 32 --bs1-prompts 32 --output-len 256 \
  --sizes 1 --variants plain,eagle_adaptive,eagle_adaptive_noassist --out $OUT/speed > $OUT/call12-speed.log 2>&1
grep -E "tok/s|start:" $OUT/call12-speed.log | head -20; cp $OUT/speed/spec_iteration.json $OUT/run12-spec_iteration-speed.json; rm -r $OUT/speed

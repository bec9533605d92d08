# call 5 (H200, the real model; carries the GGUF's third part and the eval sets): acceptance of the
# shipped head with the lookup assist, then tokens/s spec / plain in one run, then n-gram on sum
source benchmarks/results/2026-12-01-h200-baseline/env.sh
timeout 120 python benchmarks/eval_acceptance.py --model $GGUF --speed-prompts 5 --out $OUT/eval > $OUT/eval.log 2>&1
tail -14 $OUT/eval.log
timeout 330 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --num-prompts 64 --bs1-prompts 64 --output-len 256 \
  --variants plain,eagle_adaptive,eagle_s5 --out $OUT/speed > $OUT/speed.log 2>&1
grep -E "x |tok/s" $OUT/speed.log | tail -24
timeout 100 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --ngram-only --out $OUT/ngram > $OUT/ngram.log 2>&1
tail -8 $OUT/ngram.log

# Call 7 (same machine, right after call 6): spec / plain with run C's head (64 mt_bench prompts x 256 tokens,
# adaptive S, the lookup assist on; n-gram on the sum set). As it ran, inline in the device call.
source benchmarks/device/env.sh >/dev/null; timeout 200 python benchmarks/spec_iteration.py --smollm $GGUF --head /tmp/c-head --skip-lossless --variants plain,eagle_adaptive --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed 2>&1 | grep -v Warn | grep -v "^ngram" | tail -14

# call 10: GGUF part 3 and the join; tokens/s with and without speculation side by side (SmolLM2
# + builtin:smollm2, 64 mt_bench prompts x 256 tokens; n-gram on sum), the new default policy
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/c/gguf.part.ac /tmp/c/ && cp -r .stage/c/eagle-eval /tmp/c/ 2>/dev/null
cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab /tmp/c/gguf.part.ac > $GGUF && sha256sum $GGUF | cut -c1-16
timeout 560 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive,eagle_s5 \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out /tmp/si10 2>&1 | grep -v Warn | tail -40
cp /tmp/si10/*.json $OUT/run10-spec_iteration-speed.json

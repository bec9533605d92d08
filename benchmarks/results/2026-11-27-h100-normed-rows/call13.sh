# call 13: GGUF part 3 and the join; cost and tokens/s side by side under the final policy, and the
# GPU engine-graph tests that need the GGUF
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/c/gguf.part.ac /tmp/c/ && cp -r .stage/c/eagle-eval /tmp/c/ 2>/dev/null
cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab /tmp/c/gguf.part.ac > $GGUF && sha256sum $GGUF | cut -c1-16
timeout 330 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive,eagle_s5 \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out /tmp/si13 2>&1 | grep -v Warn | tail -24
cp /tmp/si13/*.json $OUT/run13-spec_iteration-speed.json
timeout 200 python -m pytest -q -m gpu tests/runtime/test_gpu_graphs.py 2>&1 | tail -3

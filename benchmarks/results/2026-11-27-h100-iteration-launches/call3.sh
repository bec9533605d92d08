# call 3 (the same machine): GGUF part c joined with a and b; speed, spec / plain in one run, with
# the real model and the shipped head (64 mt_bench prompts x 256 tokens); the GPU tests of
# attention, graphs and the engine
source benchmarks/results/2026-11-27-h100-iteration-launches/env.sh
cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab .stage/c/gguf.part.ac > $GGUF && sha256sum $GGUF | cut -c1-16
cp -r .stage/c/eagle-eval /tmp/c/
timeout 330 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive,eagle_s5 \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out /tmp/si3 > $OUT/call3-speed.log 2>&1
grep -v Warn $OUT/call3-speed.log | tail -22
cp /tmp/si3/*.json $OUT/run3-spec_iteration-speed.json
timeout 250 python -m pytest -q -x -m gpu tests/attention/test_triton_gpu.py tests/attention/test_mla_gpu.py \
  tests/runtime/test_gpu_graphs.py tests/engine/test_gpu_e2e.py > $OUT/call3-tests-gpu.log 2>&1; tail -1 $OUT/call3-tests-gpu.log

# call 6 (the same machine): GGUF part c joined with a and b; speed, spec / plain in one run, with
# the real model and the shipped head (64 mt_bench prompts x 256 tokens); the engine's GPU tests;
# first the final table's cycle at bs 1 and 8
source benchmarks/results/2026-11-27-h100-split-rows/env.sh
cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab .stage/c/gguf.part.ac > $GGUF && sha256sum $GGUF | cut -c1-16
cp -r .stage/c/eagle-eval /tmp/c/
# the final table (the qkv 64-row entry put back, call 5) at bs 1 and 8, once
UPDRAFT_CACHE=/tmp/empty timeout 60 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
  --cost-sizes 1,8 --out /tmp/s6 > /tmp/s6.log 2>&1 || tail -3 /tmp/s6.log
grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' /tmp/s6/spec_iteration.json | tr -d '\n '; echo " <- final"
cp /tmp/s6/spec_iteration.json $OUT/run6-spec_iteration-final.json
timeout 330 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive,eagle_s5 \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out /tmp/si6 > $OUT/call6-speed.log 2>&1
grep -v Warn $OUT/call6-speed.log | tail -22
cp /tmp/si6/*.json $OUT/run6-spec_iteration-speed.json
timeout 200 python -m pytest -q -x -m gpu tests/runtime/test_gpu_graphs.py tests/engine/test_gpu_e2e.py \
  > $OUT/call6-tests-gpu.log 2>&1; tail -1 $OUT/call6-tests-gpu.log

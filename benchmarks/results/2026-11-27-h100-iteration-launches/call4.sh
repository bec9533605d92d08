# call 4 (a new machine): after the tickets fix, the kit's fused-iteration column on CUDA (both
# backends; its eager check at bs 5, above the largest graph, had raised); the GPU tests of graphs
# and the engine that call 3's timeout cut
source benchmarks/results/2026-11-27-h100-iteration-launches/env.sh
timeout 100 python -m updraft.cli kit run --device cuda --no-progress --mode 'fused iteration' --backend triton \
  --backend torch_native --out $OUT/call4-kit-fused.md > $OUT/call4-kit.log 2>&1; tail -1 $OUT/call4-kit.log
timeout 120 python -m pytest -q -x -m gpu tests/runtime/test_gpu_graphs.py tests/engine/test_gpu_e2e.py \
  > $OUT/call4-tests-gpu.log 2>&1; tail -1 $OUT/call4-tests-gpu.log

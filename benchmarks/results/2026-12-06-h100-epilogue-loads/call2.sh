# usage: bash benchmarks/device/hoist_check.sh   (carrying .whl and .stage/base, as epilogue_ab.sh)
# The GEMV GPU tests on this tree (every kernel whose epilogue operands now load before the K loop, at real shapes,
# and the tiny models fused on and off), then two more alternating rounds of cost_pair.sh (the S = 5 cycle and plain
# step at bs 1 and 8, new then base). ~5 min.
source benchmarks/device/env.sh >/dev/null
timeout 200 python -m pytest -q tests/ops/test_gemv_gpu.py 2>&1 | tail -3
for r in 2 3; do bash benchmarks/device/cost_pair.sh hoist$r --random-smollm; done

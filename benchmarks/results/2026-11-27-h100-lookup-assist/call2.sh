# call 2: carry .whl and .stage/b (GGUF part 2). The GPU tests of the speculative layer (the fused
# iteration with the assist on by default, the kernels compiled).
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
timeout 500 python -m pytest -q -m gpu tests/spec -x 2>&1 | tail -5

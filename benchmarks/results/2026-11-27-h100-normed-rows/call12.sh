# call 12: GGUF part 2; the GPU tests of the kernels and models under the final policy
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/b/gguf.part.ab /tmp/c/ 2>/dev/null
timeout 300 python -m pytest -q -m gpu tests/ops tests/models 2>&1 | tail -3

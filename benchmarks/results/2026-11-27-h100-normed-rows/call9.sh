# call 9: the GPU tests of the runtime and the kit; GGUF part 2
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/b/gguf.part.ab /tmp/c/ 2>/dev/null
timeout 400 python -m pytest -q -m gpu tests/runtime tests/kit 2>&1 | tail -4

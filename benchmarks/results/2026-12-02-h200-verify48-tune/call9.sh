# Call 9 (same machine): the layer kernels at 1-48 rows with the fixed test -> 10 passed.
source benchmarks/device/env.sh >/dev/null
UPDRAFT_CACHE=/tmp/empty timeout 200 python -m pytest -m gpu -q tests/ops/test_gemv_gpu.py -k layer_kernels -p no:cacheprovider --tb=short 2>&1 | grep -v Warn | tail -4

# Call 5: the small-M kernels' GPU tests with the shipped table (the H200's new 8B entries among them).
R=benchmarks/results/2026-12-02-h200-8b-gemv-tune
source benchmarks/device/env.sh
mkdir -p /tmp/empty
UPDRAFT_CACHE=/tmp/empty timeout 400 python -m pytest -m gpu -q tests/ops/test_gemv_gpu.py -p no:cacheprovider 2>&1 | tail -15

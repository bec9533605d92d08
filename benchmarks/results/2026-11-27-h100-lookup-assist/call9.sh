# call 9 (a fresh machine): carry .stage/a. The assist in sampled iterations too (the replaced
# rows' q one-hot at their lookups): the kernels' GPU tests.
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
timeout 120 python -m pytest -q -m gpu tests/spec/test_ngram_device.py tests/spec/test_commit.py 2>&1 | tail -2

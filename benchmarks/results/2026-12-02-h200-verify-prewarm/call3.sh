# call 3 (H200; the GGUF's parts 1 and 2 staged by two calls before it, this one carries the third
# and joins them): the GPU tests, the default model's included (last session's call 4 met it absent)
source benchmarks/results/2026-12-02-h200-verify-prewarm/env.sh
timeout 500 python -m pytest -q -m gpu -p no:cacheprovider -x tests/runtime/test_gpu_graphs.py tests/engine/test_gpu_e2e.py \
  tests/spec/test_mtp_gpu.py tests/spec/test_commit.py tests/spec/test_ngram_device.py tests/ops/test_pdl.py \
  tests/models/test_deepseek_gpu.py tests/attention/test_mla_gpu.py 2>&1 | tail -8

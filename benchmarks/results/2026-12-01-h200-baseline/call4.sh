# call 4 (H200; carries the GGUF's second part): the GPU tests of the kernels, graphs and fused
# iteration, now that an H200 takes the H100's tuned launch configs
source benchmarks/results/2026-12-01-h200-baseline/env.sh
timeout 540 python -m pytest -q -m gpu -p no:cacheprovider tests/ops tests/attention/test_triton_gpu.py tests/runtime \
  tests/spec/test_ngram_device.py tests/spec/test_commit.py tests/models/test_deepseek_gpu.py 2>&1 | tail -15

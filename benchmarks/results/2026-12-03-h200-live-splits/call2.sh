# Call 2: the EAGLE-3 head's 6-row QKV (the draft extend's; H100 configs on the H200 until now) tuned inside the
# bs-1 S = 5 cycle (the 6 fastest alone recaptured), then the GPU attention sweep (call 1's was cut by its timeout).
R=benchmarks/results/2026-12-03-h200-live-splits
source benchmarks/device/env.sh
timeout 240 python benchmarks/tune_in_cycle.py --bs 1 --rows 6 --gemms head_qkv --prefilter 6 --out $OUT/tune6 \
  > $OUT/tune6.log 2>&1; grep -v Warning $OUT/tune6.log | tail -12
timeout 150 python -m pytest -m gpu -q tests/attention/test_triton_gpu.py 2>&1 | tail -2

# usage: bash benchmarks/device/extend_one_row.sh   (carrying .whl; random weights, no GGUF; ~5 min)
# The draft extend finishing each request's accepted row alone after its attention (2026-12-06,
# benchmarks/results/2026-12-06-h100-assist-beside/): the GPU tests, then the shipped state against extend_all_rows
# (every row, commit picking one) in alternating rounds at bs 1 and 8, then a profile of the cycle.
source benchmarks/device/env.sh >/dev/null
timeout 200 python -m pytest -q -p no:cacheprovider tests/spec/test_fused_gpu.py tests/spec/test_commit.py 2>&1 | tail -1
timeout 100 python benchmarks/cycle_variants.py --bs 1 --variants base,extend_all_rows --rounds 5 --out $OUT/e-bs1 2>&1 \
  | grep -v Warn | tail -2
timeout 100 python benchmarks/cycle_variants.py --bs 8 --variants base,extend_all_rows --rounds 5 --out $OUT/e-bs8 2>&1 \
  | grep -v Warn | tail -2
timeout 100 python benchmarks/cycle_profile.py --random-smollm --sizes 1,8 --iters 20 --out $OUT/prof 2>&1 | tail -1

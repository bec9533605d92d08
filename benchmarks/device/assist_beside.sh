# usage: bash benchmarks/device/assist_beside.sh 1|2|3   (carrying .whl; random weights, no GGUF; ~3-5 min a call)
# Two launches off the S = 5 cycle's critical path (2026-12-06, benchmarks/results/2026-12-06-h100-assist-beside/):
# the lookup assist beside the draft chain (its drafts taken by the picks as locks: assist_after puts its launch back
# after the chain) and the first draft's norm applied by read_rows (norm_launch: its own launch again), each timed
# against the shipped state in alternating rounds (cycle_variants.py). Call 1: the GPU tests, bs 1 x 5 rounds;
# call 2: bs 8 x 5 rounds, a profile of the cycle, the kit's graph cases on the production runner; call 3: the MTP
# and DeepSeek GPU tests (the first norm in read_rows serves MTP heads too), both levers against neither at bs 1 again.
source benchmarks/device/env.sh >/dev/null
V=base,assist_after,norm_launch,assist_after+norm_launch
if [ "$1" = 3 ]; then
  timeout 200 python -m pytest -q -p no:cacheprovider tests/spec/test_mtp_gpu.py tests/models/test_deepseek_gpu.py 2>&1 | tail -1
  timeout 120 python benchmarks/cycle_variants.py --bs 1 --variants base,assist_after+norm_launch --rounds 7 \
    --out $OUT/again-bs1 2>&1 | grep -v Warn | tail -2
elif [ "$1" = 1 ]; then
  timeout 200 python -m pytest -q -p no:cacheprovider tests/spec/test_fused_gpu.py tests/runtime/test_side_stream.py \
    tests/spec/test_ngram_device.py tests/spec/test_row_io.py tests/spec/test_sampling_kernels.py 2>&1 | tail -1
  timeout 330 python benchmarks/cycle_variants.py --bs 1 --variants $V --rounds 5 --out $OUT/v-bs1 2>&1 | grep -v Warn | tail -5
else
  timeout 260 python benchmarks/cycle_variants.py --bs 8 --variants $V --rounds 5 --out $OUT/v-bs8 2>&1 | grep -v Warn | tail -5
  timeout 150 python benchmarks/cycle_profile.py --random-smollm --sizes 1,8 --iters 20 --out $OUT/prof 2>&1 | tail -2
  timeout 150 python -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_graphs.py -k "real_graphs and triton" 2>&1 | tail -1
fi

# usage: bash benchmarks/device/merge_fold.sh 1|2   (carrying .whl; random weights, no staging; ~5-8 min a call)
# The split merge folded into the o_proj GEMV (updraft/ops/gemv_merge.py, TritonBackend.fold_merge_rows;
# benchmarks/results/2026-12-07-h100-merge-fold/): call 1 the probe at the engine's row and split counts, the GPU
# tests, the S = 5 cycle and plain step at bs 4 and 8 against no_merge_fold (alternating rounds); call 2 the cycle at
# bs 1 and 16, decode and verify steps side by side (step_pair.py, bs 1-64, alternating), the kit's graph cases.
source benchmarks/device/env.sh >/dev/null
V=base,no_merge_fold
if [ "$1" = 1 ]; then
  timeout 200 python benchmarks/oproj_fold_probe.py --out $OUT/probe.json 2>&1 | grep -v Warn | tail -17
  timeout 300 python -m pytest -q -p no:cacheprovider -m gpu tests/ops/test_gemv_merge_gpu.py tests/ops/test_gemv_gpu.py \
    tests/attention/test_triton_gpu.py tests/spec/test_fused_gpu.py 2>&1 | tail -3
  for bs in 8 4; do
    timeout 150 python benchmarks/cycle_variants.py --bs $bs --variants $V --rounds 3 --out $OUT/v-bs$bs 2>&1 | grep -v Warn | tail -3
  done
elif [ "$1" = 2 ]; then
  # after call 1 (the fold slower in the cycle at bs 4 and 8): the fold without PDL where the merge launch runs
  # without it (verify blocks of 41-64 rows), only at 41-64 rows over 8-16 splits; verify_pdl_merge: the fold with PDL
  timeout 200 python benchmarks/cycle_variants.py --bs 8 --variants $V,verify_pdl_merge --rounds 3 --out $OUT/v-bs8 2>&1 \
    | grep -v Warn | tail -4
  timeout 200 python benchmarks/step_pair.py --batch-sizes 8 --variants $V,$V --out $OUT/pair 2>&1 | grep -v Warn | tail -8
  timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/ops/test_gemv_merge_gpu.py tests/spec/test_fused_gpu.py \
    2>&1 | tail -3
fi

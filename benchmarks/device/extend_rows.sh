# usage: bash benchmarks/device/extend_rows.sh 1|2|3|4   (carrying .whl; random weights, no GGUF; ~3-5 min a call)
# The draft extend's draft-token rows' K/V stored beside the verify and each request's last accepted row run alone
# (FusedIteration.extend_rows_beside; benchmarks/results/2026-12-06-h100-extend-rows/): call 1 the GPU tests and the
# S = 5 cycle against extend_all_rows (the extend over every row) at bs 1 and 8, five alternating rounds each;
# call 2 the cycle at 4k tokens of context, a profile, the kit's graph cases on the production runner.
source benchmarks/device/env.sh >/dev/null
V=base,extend_all_rows
if [ "$1" = 1 ]; then
  timeout 240 python -m pytest -q -p no:cacheprovider -m gpu tests/spec/test_fused_gpu.py tests/spec/test_last_row.py \
    tests/spec/test_commit.py 2>&1 | tail -3
  timeout 150 python benchmarks/cycle_variants.py --bs 1 --variants $V --rounds 5 --out $OUT/v-bs1 2>&1 | grep -v Warn | tail -3
  timeout 150 python benchmarks/cycle_variants.py --bs 8 --variants $V --rounds 5 --out $OUT/v-bs8 2>&1 | grep -v Warn | tail -3
elif [ "$1" = 2 ]; then
  timeout 150 python benchmarks/cycle_variants.py --bs 1 --context 4096 --variants $V --rounds 5 --out $OUT/v-bs1-4k 2>&1 | grep -v Warn | tail -3
  timeout 150 python benchmarks/cycle_profile.py --random-smollm --sizes 1,8 --iters 20 --out $OUT/prof 2>&1 | tail -2
  timeout 200 python -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_graphs.py -k "real_graphs and triton" 2>&1 | tail -1
fi
# call 3: the pick inside the argmax three ways (ticket, preload, request: pick-modes.patch on this change, knobs
# pick_preload / pick_request) and the extend over every row. Call 4: the shipped code's GPU tests, the kit's graph
# cases on the production runner, and the bs-1 cycle against extend_all_rows over nine rounds.
if [ "$1" = 3 ]; then
  timeout 100 python -m pytest -q -p no:cacheprovider -m gpu tests/spec/test_last_row.py 2>&1 | tail -1
  for bs in 1 8; do
    timeout 200 python benchmarks/cycle_variants.py --bs $bs --variants base,pick_preload,pick_request,extend_all_rows \
      --rounds 5 --out $OUT/modes-bs$bs 2>&1 | grep -v Warn | tail -4
  done
elif [ "$1" = 4 ]; then
  timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/spec/test_fused_gpu.py tests/spec/test_last_row.py \
    tests/spec/test_commit.py tests/spec/test_mtp_gpu.py 2>&1 | tail -2
  timeout 150 python -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_graphs.py -k "real_graphs and triton" 2>&1 | tail -1
  timeout 150 python benchmarks/cycle_variants.py --bs 1 --variants $V --rounds 9 --out $OUT/v-bs1-9 2>&1 | grep -v Warn | tail -2
fi

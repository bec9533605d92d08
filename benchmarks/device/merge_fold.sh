# usage: bash benchmarks/device/merge_fold.sh 1|2|3   (carrying .whl; random weights, no staging; ~3-7 min a call)
# The split merge folded into the o_proj GEMV (updraft/ops/gemv_merge.py, TritonBackend.fold_merge_rows, shipped off;
# benchmarks/results/2026-12-07-h100-merge-fold/). Call 1 (run 2026-12-07, when the fold was on by default at 12-64
# rows over at most 16 splits with PDL, and the variants were named base / no_merge_fold): the probe at the engine's
# row and split counts, the GPU tests, the S = 5 cycle and plain step at bs 8 and 4, alternating rounds. Call 2 (run
# 2026-12-07 14:21 with ROUNDS=2 TESTS=1, call2/): the probe at 48 and 64 rows with the engine's no-PDL forms, then the
# form left in place, merge_fold (41-64 rows over 8-16 splits, the merge launch's PDL setting: off for the bs-8
# verify), against base at bs 8; ROUNDS (3), TESTS=1 the GPU tests too. Call 3: why the pair with the merge on PDL
# takes 11.7 us at 48 rows over 11 splits (~6 elsewhere): the merge's grid (48 x 3 programs there, the one case past
# the SM count) at 1 / 2 / 8 / 16 heads a program, on PDL. Call 4: call 3's sweep, then the bs-8 S = 5 cycle with
# the 48-row verify's merge on PDL and its grid within the SM count (run as merge_one_wave; the knob is merge_grid100
# now), against base and the merge on PDL with its own grid; ROUNDS (3). Call 5 (the cap shipped: merge on PDL in the 41-64-row window, grid within half
# the SMs, the extend kernel's merge capped too): base against the cap at 100%, the window's merge off PDL with the
# other merges capped (verify_pdl_decode) and the settings before (that, no cap) at bs 8; base and before at bs 4;
# then the GPU attention and fused-iteration tests, and issue 15's MLA measure (bs 8 and 64 at 8k) with the MLA
# merge's grid capped at 25 / 50 / 100% of the SMs (mla_cuda_probe.py triton_capN; MLABackend.merge_pdl_grid, off).
source benchmarks/device/env.sh >/dev/null
V=merge_fold,base
if [ "$1" = 1 ]; then
  timeout 200 python benchmarks/oproj_fold_probe.py --out $OUT/probe.json 2>&1 | grep -v Warn | tail -17
  timeout 300 python -m pytest -q -p no:cacheprovider -m gpu tests/ops/test_gemv_merge_gpu.py tests/ops/test_gemv_gpu.py \
    tests/attention/test_triton_gpu.py tests/spec/test_fused_gpu.py 2>&1 | tail -3
  for bs in 8 4; do
    timeout 150 python benchmarks/cycle_variants.py --bs $bs --variants $V --rounds 3 --out $OUT/v-bs$bs 2>&1 | grep -v Warn | tail -3
  done
elif [ "$1" = 2 ]; then
  timeout 120 python benchmarks/oproj_fold_probe.py --rows 48 64 --out $OUT/probe48.json 2>&1 | grep -v Warn | tail -3
  timeout 150 python benchmarks/cycle_variants.py --bs 8 --variants $V --rounds ${ROUNDS:-3} --out $OUT/v-bs8 2>&1 \
    | grep -v Warn | tail -3
  [ -n "$TESTS" ] && timeout 150 python -m pytest -q -p no:cacheprovider -m gpu tests/ops/test_gemv_merge_gpu.py \
    tests/spec/test_fused_gpu.py 2>&1 | tail -3
elif [ "$1" = 3 ] || [ "$1" = 4 ]; then
  timeout 200 python benchmarks/oproj_fold_probe.py --rows 48 64 --no-fold --merge-heads 1 2 8 16 --out $OUT/probe_grid.json \
    2>&1 | grep -v Warn | grep -v "^m"
  OUT=$OUT python - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/probe_grid.json"))
for r in d["rows"]:
    print(r["rows"], r["splits"], r["live"], f'{r["variant"]:40s} {r["us"]:6.2f} us')
PY
  P=verify_pdl_decode+verify_pdl_merge
  [ "$1" = 4 ] && timeout 280 python benchmarks/cycle_variants.py --bs 8 --variants base,$P+merge_grid100,$P \
    --rounds ${ROUNDS:-3} --out $OUT/v-bs8 2>&1 | grep -v Warn | tail -4
elif [ "$1" = 5 ]; then
  timeout 150 python benchmarks/cycle_variants.py --bs 8 --rounds ${ROUNDS:-3} --out $OUT/v-bs8 \
    --variants base,merge_grid100,verify_pdl_decode,verify_pdl_decode+merge_grid_off 2>&1 | grep -v Warn | tail -4
  timeout 120 python benchmarks/cycle_variants.py --bs 4 --rounds ${ROUNDS:-3} --out $OUT/v-bs4 \
    --variants base,verify_pdl_decode+merge_grid_off 2>&1 | grep -v Warn | tail -2
  timeout 200 python benchmarks/mla_cuda_probe.py --out $OUT/mla --kernels triton_cap25,triton_cap50,triton_cap100 \
    --shapes 8x8192,64x8192 --sides stored --rounds 3 2>&1 | grep -v Warn | tail -4
  timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/attention/test_triton_gpu.py tests/spec/test_fused_gpu.py \
    tests/ops/test_gemv_merge_gpu.py 2>&1 | tail -3
fi
true

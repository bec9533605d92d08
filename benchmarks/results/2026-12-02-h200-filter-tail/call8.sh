# call 8 (H200, a fresh machine; carries .whl): top-k rows now count only the tokens at or above the floor their
# group maxima give: the filter and rejection kernels' tests on CUDA, filter_hist_bench (compare call 2 / 3)
R=benchmarks/results/2026-12-02-h200-filter-tail
source $R/env.sh
timeout 150 python -m pytest -q -p no:cacheprovider tests/spec/test_filter_rows.py tests/spec/test_rejection_kernels.py 2>&1 | tail -2
timeout 100 python benchmarks/filter_hist_bench.py --rows 6,48 --vocabs 49152,128256 --out $OUT/filter_hist_new8 \
  > $OUT/filter_hist_new8.log 2>&1; echo "filter bench rc $?"; tail -16 $OUT/filter_hist_new8.log

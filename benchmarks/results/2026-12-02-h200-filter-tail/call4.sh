# call 4 (H200; carries .stage/p2): the filter and rejection kernels' tests on CUDA
R=benchmarks/results/2026-12-02-h200-filter-tail
source $R/env.sh
timeout 150 python -m pytest -q -p no:cacheprovider tests/spec/test_filter_rows.py tests/spec/test_rejection_kernels.py 2>&1 | tail -3

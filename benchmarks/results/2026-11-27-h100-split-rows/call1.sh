# call 1: the focused sweep at 48 rows (winners stored in /tmp/c); the gemv GPU tests
source benchmarks/results/2026-11-27-h100-split-rows/env.sh
time timeout 330 python $R/split_sweep.py --out $OUT --store 2>&1 | tee $OUT/call1-sweep.log | grep -v "^ "
cp /tmp/c/gemv_configs.json $OUT/call1-gemv_configs.json
timeout 150 python -m pytest -q -m gpu tests/ops/test_gemv_gpu.py > $OUT/call1-tests-gpu.log 2>&1; tail -2 $OUT/call1-tests-gpu.log

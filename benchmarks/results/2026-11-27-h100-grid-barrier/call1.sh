# call 1: the grid-barrier probe; the runtime's GPU tests (graphs), which call 6 of
# ../2026-11-27-h100-split-rows/ did not finish
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
R=benchmarks/results/2026-11-27-h100-grid-barrier
timeout 200 python $R/barrier_probe.py --out $OUT 2>&1 | grep -v -i warn | tee $OUT/call1-probe.log
timeout 200 python -m pytest -q -m gpu tests/runtime > $OUT/call1-tests-gpu.log 2>&1; tail -1 $OUT/call1-tests-gpu.log

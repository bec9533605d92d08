# call 3 (H200; carries .stage/base, .whl): the change as committed (call 2's tile-slowest grid order taken out again,
# kept as lpt-grid.patch; one split keeps split 0 a constant) against main before it (base = 6b37ad9): prefill
# graphs' plan and the eager plan, one round each, the GPU tests of the extend kernel, then a second graph round
# (the budget left: 280 s; the kit's graph mode ran in call 2, with the grid order this call leaves out: 4 passed).
R=benchmarks/results/2026-12-02-h200-prefill-direct
source benchmarks/device/env.sh
SH=1/0/256,4/0/256,1/0/1024,1/0/4096,1/512/256,8/0/1024,8/1024/256
bench() { for run in "$@"; do mode=${run%:*}; round=${run#*:}; for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  flag=""; [ $mode = graph ] && flag=--as-graph
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/prefill_sweep.py --production-only $flag \
     --shapes $SH --out $OUT/${mode}_${side}_$round 2>&1 | grep -v Warn | grep -E "bs " | cut -c1-90)
  echo "$mode $side round $round"
done; done; }
bench graph:1 eager:1
timeout 60 python -m pytest -q tests/attention/test_triton_gpu.py > $OUT/tests.txt 2>&1; tail -3 $OUT/tests.txt
bench graph:2

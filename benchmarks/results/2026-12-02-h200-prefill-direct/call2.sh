# call 2 (H200; carries .stage/base, .whl): the extend kernel now (the epilogue's two stores masked rather than
# branched: call 1's branch spilled the 8B tile, 255 registers + 64 B of stack against main's 184; the grid with
# the tile index slowest and reversed, the last split first) against main before it (base = 6b37ad9), production
# tiles, two rounds, planned as a prefill graph plans them (--as-graph: the split policy) and eagerly (one split
# without a prefix: the grid order alone); then the GPU tests of the extend / merge / MLA kernels and the kit's
# graph mode (prefill graphs with a request without prefix beside others); the MLA probe again with the slots
# two blocks ahead (call 1 left it out).
R=benchmarks/results/2026-12-02-h200-prefill-direct
source benchmarks/device/env.sh
SH=1/0/256,4/0/256,1/0/1024,1/0/4096,1/512/256,8/0/1024,8/1024/256
for round in 1 2; do for mode in graph eager; do for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  flag=""; [ $mode = graph ] && flag=--as-graph
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/prefill_sweep.py --production-only $flag \
     --shapes $SH --out $OUT/${mode}_${side}_$round 2>&1 | grep -v Warn | grep -E "bs ")
  echo "$mode $side round $round"
done; done; done
timeout 200 python -m pytest -q tests/attention/test_triton_gpu.py tests/attention/test_mla_gpu.py 2>&1 | tail -4
timeout 150 python -m pytest -q tests/runtime/test_gpu_graphs.py -k "real_graphs" 2>&1 | tail -6
timeout 90 python benchmarks/mla_timeline_probe.py --shapes 8/8192/16,8/32768/16 --out $OUT/mla_timeline.json 2>&1 | grep -v Warn
(cd $OUT && tar czf call2.tgz --remove-files *)

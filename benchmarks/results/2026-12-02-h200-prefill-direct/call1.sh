# call 1 (H200; carries .stage/base): prefill graphs' split extend where a request has no cached prefix (its last
# split writes the output, the merge leaves its rows) against main before it (base = 6b37ad9), production tiles,
# planned as a prefill graph plans them (--as-graph), two rounds; then the MLA decode timeline probe and the
# decode kernel's tile / split sweep on this GPU, and the GPU tests of the changed kernels.
R=benchmarks/results/2026-12-02-h200-prefill-direct
source benchmarks/device/env.sh
SH=1/0/256,4/0/256,1/0/1024,1/0/4096,1/512/256,8/0/1024
for round in 1 2; do for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/prefill_sweep.py --production-only --as-graph \
     --shapes $SH --out $OUT/graph_${side}_$round 2>&1 | grep -v Warn | grep -E "bs ")
  echo "$side round $round"
done; done
timeout 90 python benchmarks/mla_timeline_probe.py --out $OUT/mla_timeline.json 2>&1 | grep -v Warn
timeout 120 python -m pytest -q -x tests/attention/test_triton_gpu.py tests/runtime/test_gpu_graphs.py -k "not engine and not first_step" 2>&1 | tail -4
timeout 210 python benchmarks/mla_bench.py --pipeline-sweep --heads 16 --only decode --out $OUT/mla_pipeline.json 2>&1 | grep -v Warn | tail -60
(cd $OUT && tar czf call1.tgz --remove-files *)

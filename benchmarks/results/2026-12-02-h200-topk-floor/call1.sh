# call 1 (H200; carries .stage/base, .stage/p1, .whl): the top-k floor (new) against main before it (base):
# filter_hist_bench side by side (with the max launch's registers), the SmolLM2 S = 5 cycle with random weights,
# top-p 0.9 alone and with top-k 50, and the filter / rejection tests on CUDA
R=benchmarks/results/2026-12-02-h200-topk-floor
source benchmarks/device/env.sh
for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/filter_hist_bench.py --rows 6,48 --vocabs 49152,128256 \
     --out $OUT/filter_hist_$side > $OUT/filter_hist_$side.log 2>&1); echo "filter bench $side rc $?"; tail -18 $OUT/filter_hist_$side.log
done
bash benchmarks/device/cost_pair.sh topp1 --random-smollm
bash benchmarks/device/cost_pair.sh topk1 --random-smollm --sampled-top-k 50
timeout 120 python -m pytest -q -p no:cacheprovider tests/spec/test_filter_rows.py tests/spec/test_rejection_kernels.py 2>&1 | tail -3
(cd $OUT && tar czf call1.tgz --remove-files *)

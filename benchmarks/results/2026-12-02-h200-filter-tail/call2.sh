# call 2 (H200; carries .stage/base, .whl): the filter's histogram with its top-p tail left out
# (new) against main before it (base): filter_hist_bench side by side, the SmolLM2 S = 5 cycle with random
# weights in alternating rounds, the filter / rejection tests on CUDA
R=benchmarks/results/2026-12-02-h200-filter-tail
source $R/env.sh
for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/filter_hist_bench.py --rows 6,48 --vocabs 49152,128256 \
     --out $OUT/filter_hist_$side.json > $OUT/filter_hist_$side.log 2>&1); echo "filter bench $side rc $?"; tail -12 $OUT/filter_hist_$side.log
done
bash $R/cost_pair.sh random1 --random-smollm
bash $R/cost_pair.sh random2 --random-smollm
timeout 150 python -m pytest -q -p no:cacheprovider tests/spec/test_filter_rows.py tests/spec/test_rejection_kernels.py 2>&1 | tail -3

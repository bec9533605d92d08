# call 3 (H200; carries .stage/base, .stage/p1, .whl): the max launch now zeroes the bins (no memset): the filter
# bench (new only; base's is call 2's) and the SmolLM2 S = 5 cycle with random weights, new against base, twice
R=benchmarks/results/2026-12-02-h200-filter-tail
source $R/env.sh
timeout 100 python benchmarks/filter_hist_bench.py --rows 6,48 --vocabs 49152,128256 --out $OUT/filter_hist_new3 \
  > $OUT/filter_hist_new3.log 2>&1; echo "filter bench rc $?"; tail -16 $OUT/filter_hist_new3.log
bash $R/cost_pair.sh random3 --random-smollm
bash $R/cost_pair.sh random4 --random-smollm

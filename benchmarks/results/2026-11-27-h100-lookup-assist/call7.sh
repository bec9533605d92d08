# call 7 (a fresh machine): the lookup kernel with independent loads (the suffix read once, the
# N_MAX window loads masked by position only, 1024 candidate ends a block): its GPU test, then the
# S = 5 cycle with the assist off / on again, two alternating rounds (as call 1).
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
timeout 120 python -m pytest -q -m gpu tests/spec/test_ngram_device.py tests/spec/test_commit.py 2>&1 | tail -2
for round in 1 2; do
  for a in 0 3; do
    timeout 150 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless --cost-sizes 1,8 \
      --ngram-assist $a --out $OUT/cost-assist$a-r$round > $OUT/call7-cost-assist$a-r$round.log 2>&1
    cp $OUT/cost-assist$a-r$round/spec_iteration.json $OUT/run7-cost-assist$a-r$round.json; rm -r $OUT/cost-assist$a-r$round
    grep -E '"(cycle_ms)_greedy' $OUT/call7-cost-assist$a-r$round.log | tr -d '\n '; echo " <- assist $a round $round"
  done
done

# call 8 (the same machine as call 7): two more alternating rounds of the cycle, assist off / on.
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
for round in 3 4; do
  for a in 0 3; do
    timeout 150 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless --cost-sizes 1,8 \
      --ngram-assist $a --out $OUT/cost-assist$a-r$round > $OUT/call8-cost-assist$a-r$round.log 2>&1
    cp $OUT/cost-assist$a-r$round/spec_iteration.json $OUT/run8-cost-assist$a-r$round.json; rm -r $OUT/cost-assist$a-r$round
    grep -E '"(cycle_ms)_greedy' $OUT/call8-cost-assist$a-r$round.log | tr -d '\n '; echo " <- assist $a round $round"
  done
done

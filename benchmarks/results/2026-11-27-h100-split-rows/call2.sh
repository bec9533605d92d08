# call 2: S = 5 cycle cost, base (HEAD before the change, shipped configs), the change with the
# shipped configs, the change with call 1's tuned configs; alternating
source benchmarks/results/2026-11-27-h100-split-rows/env.sh
for i in 1 2; do
  for v in base shipped split; do
    P=$PWD; C=/tmp/empty
    [ $v = base ] && P=/tmp/base
    [ $v = split ] && C=/tmp/c
    /usr/bin/time -f "%e s" env PYTHONPATH=$P UPDRAFT_CACHE=$C timeout 150 python $P/benchmarks/spec_iteration.py --random-smollm \
      --skip-speed --skip-lossless --sizes 1,8 --out /tmp/si-$v-$i > /tmp/si-$v-$i.log 2>&1
    tail -1 /tmp/si-$v-$i.log; cp /tmp/si-$v-$i.log $OUT/; [ -f /tmp/si-$v-$i/spec_iteration.json ] || tail -5 /tmp/si-$v-$i.log
    grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' /tmp/si-$v-$i/spec_iteration.json | tr -d '\n '; echo " <- $v $i"
    cp /tmp/si-$v-$i/spec_iteration.json $OUT/run2-spec_iteration-$v-$i.json
  done
done

# call 4 (a fresh machine): stage GGUF part a; the attention kit on CUDA, full tier (the
# committed docs/attention-matrix-h100.md); the S = 5 cycle at bs 4 (24-row verify blocks: the
# 32-row bucket's configs), base against the change (the shipped table now holds the tuned configs)
source benchmarks/results/2026-11-27-h100-split-rows/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
timeout 300 python -m updraft.cli kit run --device cuda --no-progress --json $OUT/call4-kit.json \
  --out $OUT/attention-matrix-h100.md > $OUT/call4-kit.log 2>&1; tail -2 $OUT/call4-kit.log
for i in 1 2; do
  for v in base new; do
    P=$PWD; [ $v = base ] && P=/tmp/base
    PYTHONPATH=$P UPDRAFT_CACHE=/tmp/empty timeout 100 python benchmarks/spec_iteration.py --random-smollm --skip-speed \
      --skip-lossless --cost-sizes 4,8 --out /tmp/s4-$v-$i > /tmp/s4-$v-$i.log 2>&1 || tail -5 /tmp/s4-$v-$i.log
    grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' /tmp/s4-$v-$i/spec_iteration.json | tr -d '\n '; echo " <- $v $i"
    cp /tmp/s4-$v-$i/spec_iteration.json $OUT/run4-spec_iteration-$v-$i.json
  done
done

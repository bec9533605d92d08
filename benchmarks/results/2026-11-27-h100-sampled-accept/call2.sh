# call 2: GGUF part 1 (again: call 1's machine was given back); the acceptance's walk over the
# drafts in one step (its loads no longer chained draft after draft); GPU tests of the touched
# code; S = 5 cycle cost base (f601e43) against this change, alternating; per-kernel times (PDL off)
source benchmarks/results/2026-11-27-h100-sampled-accept/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
timeout 100 python -m pytest -q -x tests/spec/test_rejection_kernels.py 2>&1 | tail -1
for i in 1 2; do
  for v in base new; do
    if [ $v = base ]; then P=/tmp/base; else P=$PWD; fi
    PYTHONPATH=$P timeout 120 python $P/benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --sizes 1,8 --out /tmp/si-$v-$i 2>&1 | grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' | tr -d '\n'; echo " <- $v $i"
    cp /tmp/si-$v-$i/spec_iteration.json $OUT/run2-spec_iteration-$v-$i.json
  done
done
UPDRAFT_PDL=0 timeout 120 python benchmarks/cycle_profile.py --random-smollm --out /tmp/cp0 > /tmp/cp0.log 2>&1; grep -E "==|sampled_minus" /tmp/cp0.log
cp /tmp/cp0/*.json $OUT/run2-cycle_profile-pdl0.json
timeout 200 python -m pytest -q -m gpu tests/spec -x 2>&1 | tail -2

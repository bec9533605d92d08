# call 7 (a new machine): the top-k's search bounded by the group maxima; GPU tests of the top-k and
# the acceptance; S = 5 cycle cost base (f601e43) against this change, alternating; per-kernel times
source benchmarks/results/2026-11-27-h100-sampled-accept/env.sh
timeout 100 python -m pytest -q -x tests/spec/test_topk_rows.py tests/spec/test_sampling_kernels.py 2>&1 | tail -1
for i in 1 2; do
  for v in base new; do
    if [ $v = base ]; then P=/tmp/base; else P=$PWD; fi
    PYTHONPATH=$P timeout 120 python $P/benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --sizes 1,8 --out /tmp/si-$v-$i 2>&1 | grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' | tr -d '\n'; echo " <- $v $i"
    cp /tmp/si-$v-$i/spec_iteration.json $OUT/run7-spec_iteration-$v-$i.json
  done
done
UPDRAFT_PDL=0 timeout 120 python benchmarks/cycle_profile.py --random-smollm --out /tmp/cp0 > /tmp/cp0.log 2>&1; grep -E "==|sampled_minus" /tmp/cp0.log
cp /tmp/cp0/*.json $OUT/run7-cycle_profile-pdl0.json

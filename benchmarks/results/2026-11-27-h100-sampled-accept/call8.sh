# call 8 (a new machine): the whole change as committed (acceptance in one launch of many programs,
# bf16 verify logits, the top-k's bounded search, the uniforms drawn in read_rows); GPU tests of the
# spec code; S = 5 cycle cost base (f601e43) against it, alternating three times; per-kernel times
source benchmarks/results/2026-11-27-h100-sampled-accept/env.sh
timeout 150 python -m pytest -q -x tests/spec/test_write_rows.py tests/spec/test_rejection_kernels.py tests/spec/test_topk_rows.py \
  tests/spec/test_sampling_kernels.py 2>&1 | tail -1
timeout 100 python -m pytest -q -m gpu tests/spec -x 2>&1 | tail -1
for i in 1 2 3; do
  for v in base new; do
    if [ $v = base ]; then P=/tmp/base; else P=$PWD; fi
    PYTHONPATH=$P timeout 120 python $P/benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --sizes 1,8 --out /tmp/si-$v-$i 2>&1 | grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' | tr -d '\n'; echo " <- $v $i"
    cp /tmp/si-$v-$i/spec_iteration.json $OUT/run8-spec_iteration-$v-$i.json
  done
done
UPDRAFT_PDL=0 timeout 120 python benchmarks/cycle_profile.py --random-smollm --out /tmp/cp0 > /tmp/cp0.log 2>&1; grep -E "==|sampled_minus" /tmp/cp0.log
cp /tmp/cp0/*.json $OUT/run8-cycle_profile-pdl0.json

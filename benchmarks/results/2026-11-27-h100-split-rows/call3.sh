# call 3: the 24-row layer sweep and the EAGLE-3 head's QKV at 1 / 6 / 48 rows (winners added to
# call 1's); cycles with the shipped configs against all tuned ones; the gemv GPU tests; per-kernel
# times (PDL off) with the tuned configs
source benchmarks/results/2026-11-27-h100-split-rows/env.sh
cp $R/call1-gemv_configs.json /tmp/c/gemv_configs.json
time timeout 300 python $R/split_sweep.py --out $OUT --store --m 24 --head-qkv 1,6,48 2>&1 | tee $OUT/call3-sweep.log | grep -v "^ "
cp /tmp/c/gemv_configs.json $OUT/call3-gemv_configs.json
for i in 1 2; do
  for v in shipped tuned; do
    C=/tmp/empty; [ $v = tuned ] && C=/tmp/c
    UPDRAFT_CACHE=$C timeout 100 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --sizes 1,8 --out /tmp/s3-$v-$i > /tmp/s3-$v-$i.log 2>&1 || tail -5 /tmp/s3-$v-$i.log
    grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' /tmp/s3-$v-$i/spec_iteration.json | tr -d '\n '; echo " <- $v $i"
    cp /tmp/s3-$v-$i/spec_iteration.json $OUT/run3-spec_iteration-$v-$i.json
  done
done
timeout 100 python -m pytest -q -m gpu tests/ops/test_gemv_gpu.py > $OUT/call3-tests-gpu.log 2>&1; tail -1 $OUT/call3-tests-gpu.log
UPDRAFT_PDL=0 timeout 100 python benchmarks/cycle_profile.py --random-smollm --out /tmp/cp0 > /tmp/cp0.log 2>&1; grep -E "==" /tmp/cp0.log
cp /tmp/cp0/*.json $OUT/run3-cycle_profile-pdl0-tuned.json

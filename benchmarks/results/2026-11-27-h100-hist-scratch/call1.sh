# call 1: the sampled cycle, base (05f2447: fresh zeroed counters per launch) against the owned
# scratch, alternating twice; the filter / rejection tests on CUDA; -m gpu tests/spec
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/empty PYTHONUNBUFFERED=1
mkdir -p /tmp/empty
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/base && tar xzf .stage/base/base.tar.gz -C /tmp/base && ln -sfn $PWD/updraft/heads /tmp/base/updraft/heads
for i in 1 2; do
  for v in base new; do
    P=$PWD; [ $v = base ] && P=/tmp/base
    PYTHONPATH=$P timeout 100 python $P/benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --out /tmp/s-$v-$i > /tmp/s-$v-$i.log 2>&1 || tail -3 /tmp/s-$v-$i.log
    grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' /tmp/s-$v-$i/spec_iteration.json | tr -d '\n '; echo " <- $v $i"
    cp /tmp/s-$v-$i/spec_iteration.json $OUT/run1-spec_iteration-$v-$i.json
  done
done
timeout 200 python -m pytest -q -x tests/spec/test_filter_rows.py tests/spec/test_rejection_kernels.py > $OUT/call1-tests-filter.log 2>&1; tail -1 $OUT/call1-tests-filter.log
timeout 100 python -m pytest -q -m gpu tests/spec > $OUT/call1-tests-gpu.log 2>&1; tail -1 $OUT/call1-tests-gpu.log

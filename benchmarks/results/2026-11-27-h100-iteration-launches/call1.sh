# call 1: stage GGUF part a; the GPU tests of the changed code; S = 5 cycle cost, base (12a23bf)
# against the change, alternating twice; per-kernel times with PDL off
source benchmarks/results/2026-11-27-h100-iteration-launches/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
timeout 100 python -m pytest -q -x tests/spec/test_rejection_kernels.py tests/spec/test_sampling_kernels.py \
  > $OUT/call1-tests-spec-kernels.log 2>&1; tail -1 $OUT/call1-tests-spec-kernels.log
timeout 130 python -m pytest -q -x -m gpu tests/spec tests/ops/test_gemv_gpu.py > $OUT/call1-tests-gpu.log 2>&1; tail -1 $OUT/call1-tests-gpu.log
for i in 1 2; do
  for v in base new; do
    if [ $v = base ]; then P=/tmp/base; else P=$PWD; fi
    PYTHONPATH=$P timeout 120 python $P/benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --sizes 1,8 --out /tmp/si-$v-$i > /tmp/si-$v-$i.log 2>&1
    grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' /tmp/si-$v-$i/spec_iteration.json | tr -d '\n '; echo " <- $v $i"
    cp /tmp/si-$v-$i/spec_iteration.json $OUT/run1-spec_iteration-$v-$i.json
  done
done
UPDRAFT_PDL=0 timeout 120 python benchmarks/cycle_profile.py --random-smollm --out /tmp/cp0 > /tmp/cp0.log 2>&1; grep -E "==" /tmp/cp0.log
cp /tmp/cp0/*.json $OUT/run1-cycle_profile-pdl0.json

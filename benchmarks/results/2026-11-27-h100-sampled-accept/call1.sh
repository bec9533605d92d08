# call 1: GGUF part 1; GPU tests of the acceptance kernels; S = 5 cycle cost, base (f601e43) against
# this change (one acceptance launch of many programs, bf16 verify logits), random SmolLM2 shape +
# builtin:smollm2, alternating; per-kernel times (PDL off); the LM heads (target 49k and draft 8k
# vocabularies) fused with norm + argmax, tuned, against cuBLAS
source benchmarks/results/2026-11-27-h100-sampled-accept/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
timeout 150 python -m pytest -q -x tests/spec/test_rejection_kernels.py tests/spec/test_filter_rows.py 2>&1 | tail -2
for i in 1 2; do
  for v in base new; do
    if [ $v = base ]; then P=/tmp/base; else P=$PWD; fi
    PYTHONPATH=$P timeout 120 python $P/benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --sizes 1,8 --out /tmp/si-$v-$i 2>&1 | grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|sampled_over)' | tr -d '\n'; echo " <- $v $i"
    cp /tmp/si-$v-$i/spec_iteration.json $OUT/run1-spec_iteration-$v-$i.json
  done
done
UPDRAFT_PDL=0 timeout 120 python benchmarks/cycle_profile.py --random-smollm --out /tmp/cp0 > /tmp/cp0.log 2>&1; tail -25 /tmp/cp0.log
cp /tmp/cp0/*.json $OUT/run1-cycle_profile-pdl0.json
timeout 200 python benchmarks/decode_kernels.py --tune --models smollm2,smollm2-draft --gemms lm_head --m-values 1,6,8 \
  --skip-steps --out /tmp/dk > /tmp/dk.log 2>&1; tail -12 /tmp/dk.log
cp /tmp/dk/decode_kernels.json $OUT/run1-decode_kernels-lm-head.json; cp /tmp/c/gemv_configs.json $OUT/run1-gemv_configs.json
timeout 100 python benchmarks/decode_kernels.py --models smollm2 --skip-gemms --variants fused,fused_head --batch-sizes 1,8 \
  --out /tmp/dk2 > /tmp/dk2.log 2>&1; grep -E "smollm2" /tmp/dk2.log | head -12
cp /tmp/dk2/decode_kernels.json $OUT/run1-decode_kernels-fused-head.json

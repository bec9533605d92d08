# call 5 (the same machine): stage GGUF part b; the bs-8 cycle with each changed shipped entry put
# back to its old config in turn (variants.py), the change and the old table; bs 4 with the 32-row
# entries reverted (call 4 measured them slower in the cycle); the GPU tests of the iteration
source benchmarks/results/2026-11-27-h100-split-rows/env.sh
cp .stage/b/gguf.part.ab /tmp/c/
python $R/variants.py $R/gemv_tuned-before.json /tmp/v
mkdir -p /tmp/v/new
for v in new old minus_linear_k=576 minus_linear_k=1536 minus_qkv_k=576 new; do
  UPDRAFT_CACHE=/tmp/v/$v timeout 60 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
    --cost-sizes 4,8 --out /tmp/s5-$v > /tmp/s5-$v.log 2>&1 || tail -3 /tmp/s5-$v.log
  grep -E '"(plain_step_ms|cycle_ms_greedy_bs)' /tmp/s5-$v/spec_iteration.json | tr -d '\n '; echo " <- $v"
  cp /tmp/s5-$v/spec_iteration.json $OUT/run5-spec_iteration-$v.json
done
timeout 200 python -m pytest -q -m gpu tests/spec > $OUT/call5-tests-gpu.log 2>&1; tail -1 $OUT/call5-tests-gpu.log

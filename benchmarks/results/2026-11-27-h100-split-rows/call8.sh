# call 8: bucket-8 configs (bs 1's 6-row verify and draft extend) timed in the cycle
# (benchmarks/tune_in_cycle.py, winners kept in /tmp/t one GEMM after another), then the cycle at
# bs 1 and 8 with them against the shipped table (bucket 8 also runs the bs-8 plain step and chain)
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/t /tmp/empty
UPDRAFT_CACHE=/tmp/t timeout 330 python benchmarks/tune_in_cycle.py --bs 1 --rows 6 --gemms qkv,o,gate_up,down \
  --max 16 --iters 15 --store --out $OUT 2>&1 | grep -v -i warn | tee $OUT/call8-tune.log | grep -v "^  "
cp /tmp/t/gemv_configs.json $OUT/call8-gemv_configs.json
for v in shipped tuned; do
  C=/tmp/empty; [ $v = tuned ] && C=/tmp/t
  UPDRAFT_CACHE=$C timeout 60 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
    --cost-sizes 1,8 --out /tmp/s8-$v > /tmp/s8-$v.log 2>&1 || tail -3 /tmp/s8-$v.log
  grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled))_bs' /tmp/s8-$v/spec_iteration.json | tr -d '\n '; echo " <- $v"
  cp /tmp/s8-$v/spec_iteration.json $OUT/run8-spec_iteration-$v.json
done

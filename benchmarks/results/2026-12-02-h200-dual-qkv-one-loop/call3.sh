# call 3 (H200; carries .whl): the one-loop head QKV now also prefetches the feature's weight columns before its
# PDL wait: its FMA configs (4 warps) timed in the S = 5 cycle; then the target's one-row QKV, o_proj and gate/up
# (the head's o_proj and gate/up share their shapes and configs) with the sweep's 1024-wide K chunk
R=benchmarks/results/2026-12-02-h200-dual-qkv-one-loop
source benchmarks/device/env.sh
timeout 120 python benchmarks/tune_in_cycle.py --bs 1 --rows 1 --gemms head_qkv --tiles fma --warps 4 --iters 10 \
  --out $OUT/tune_head 2>&1 | grep -v Warn | tail -14
timeout 400 python benchmarks/tune_in_cycle.py --bs 1 --rows 1 --gemms qkv,o,gate_up --tiles fma --iters 10 \
  --out $OUT/tune_target 2>&1 | grep -v Warn | grep -E "best|current|1024|^bs"
(cd $OUT && tar czf call3.tgz --remove-files *)

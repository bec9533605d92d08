# call 2 (H200, back to back with call 1; carries .stage/base, .whl): a second round of the cycle's cost side by
# side, then the one-loop head QKV's launch configs timed in the S = 5 cycle (the sweep now offers a 1024-wide K
# chunk: each input's 576 columns in one step)
R=benchmarks/results/2026-12-02-h200-dual-qkv-one-loop
source benchmarks/device/env.sh
bash benchmarks/device/cost_pair.sh dual2 --random-smollm
timeout 240 python benchmarks/tune_in_cycle.py --bs 1 --rows 1 --gemms head_qkv --iters 10 --out $OUT/tune 2>&1 \
  | grep -v Warn | tail -26
(cd $OUT && tar czf call2.tgz --remove-files *)

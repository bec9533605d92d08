# call 1 (H200, a fresh machine; carries .whl): the EAGLE-3 head's one-row QKV (a chain step at bs 1)
# timed in the S = 5 cycle at each of the sweep's 18 three-stage launch configs (random SmolLM2 + the
# shipped head; the H200 runs the H100's tuned config for it)
source benchmarks/device/env.sh
timeout 170 python benchmarks/tune_in_cycle.py --bs 1 --rows 1 --gemms head_qkv --iters 10 --out $OUT/tune 2>&1 \
  | grep -v Warn | tail -24

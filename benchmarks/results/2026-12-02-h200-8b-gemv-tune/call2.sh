# Call 2 (same machine, right after call 1): the 6-row bucket swept too, then the 8B decode step and
# 6-token verify with the H100's entries (an empty cache) against the H200's sweep (the cache).
R=benchmarks/results/2026-12-02-h200-8b-gemv-tune
source benchmarks/device/env.sh
timeout 200 python benchmarks/decode_kernels.py --out $OUT/tune6 --tune --models llama8b --gemms qkv,o,gate_up,down \
    --m-values 6 --skip-steps --peak-bw 4.279e12 2>&1 | grep -v Warn
cp /tmp/c/gemv_configs.json $OUT/gemv_configs-call2.json
mkdir -p /tmp/empty
for round in 1 2; do
  UPDRAFT_CACHE=/tmp/empty timeout 100 python benchmarks/decode_kernels.py --out $OUT/steps_h100_$round --models llama8b \
      --skip-gemms --variants fused --peak-bw 4.279e12 2>&1 | grep -v Warn | tail -4
  timeout 100 python benchmarks/decode_kernels.py --out $OUT/steps_h200_$round --models llama8b \
      --skip-gemms --variants fused --peak-bw 4.279e12 2>&1 | grep -v Warn | tail -4
done

# Call 2 (same machine, right after call 1: /tmp/c holds its sweep): the 24-row bucket (32: a verify at
# bs 4) swept the same way, then the bs-4 steps.
R=benchmarks/results/2026-12-02-h200-wide-rows
source benchmarks/device/env.sh
timeout 400 python benchmarks/decode_kernels.py --out $OUT/tune32 --tune --models llama8b --gemms qkv,o,gate_up,down \
    --m-values 24 --skip-steps --peak-bw 4.279e12 2>&1 | grep -v Warn | tail -8
cp /tmp/c/gemv_configs.json $OUT/gemv_configs-call2.json
timeout 180 bash $R/steps.sh steps_bs4_1 4

# Call 3 (same machine, right after call 2): the 48-row bucket (64: a verify at bs 8) swept the same way,
# then decode and verify at bs 8, 16 and 32 (plain decode at 9-64 rows takes the same buckets).
R=benchmarks/results/2026-12-02-h200-wide-rows
source benchmarks/device/env.sh
timeout 330 python benchmarks/decode_kernels.py --out $OUT/tune64 --tune --models llama8b --gemms qkv,o,gate_up,down \
    --m-values 48 --skip-steps --peak-bw 4.279e12 2>&1 | grep -v Warn | tail -8
cp /tmp/c/gemv_configs.json $OUT/gemv_configs-call3.json
timeout 240 bash $R/steps.sh steps_bs8-32_1 8,16,32

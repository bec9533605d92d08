# Call 1 (fresh machine; carries .whl): the 8B shape's small-M GEMMs at 12 token rows (M bucket 16: a
# 6-token verify at bs 2) on the heuristic config against cuBLAS, then the bucket swept on the H200 (the
# winners land in /tmp/c/gemv_configs.json, copied to $OUT); then the bs-2 steps with them.
R=benchmarks/results/2026-12-02-h200-wide-rows
source benchmarks/device/env.sh
timeout 330 python benchmarks/decode_kernels.py --out $OUT/tune16 --tune --models llama8b --gemms qkv,o,gate_up,down \
    --m-values 12 --skip-steps --peak-bw 4.279e12 2>&1 | grep -v Warn | tail -8
cp /tmp/c/gemv_configs.json $OUT/gemv_configs-call1.json
timeout 200 bash $R/steps.sh steps_bs2_1 2

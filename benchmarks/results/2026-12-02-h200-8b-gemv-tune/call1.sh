# Call 1: the 8B shape's small-M GEMMs on the H200 with the H100's entries (family fallback), then
# the one-row bucket swept on the H200 itself (the winners land in $UPDRAFT_CACHE/gemv_configs.json).
R=benchmarks/results/2026-12-02-h200-8b-gemv-tune
source benchmarks/device/env.sh
python -c "import torch; print(torch.__version__)"
timeout 150 python benchmarks/decode_kernels.py --out $OUT/before --models llama8b --gemms qkv,o,gate_up,down \
    --m-values 1,6 --skip-steps --peak-bw 4.279e12 2>&1 | grep -v Warn
timeout 330 python benchmarks/decode_kernels.py --out $OUT/tune1 --tune --models llama8b --gemms qkv,o,gate_up,down \
    --m-values 1 --skip-steps --peak-bw 4.279e12 2>&1 | grep -v Warn
cp /tmp/c/gemv_configs.json $OUT/gemv_configs-call1.json

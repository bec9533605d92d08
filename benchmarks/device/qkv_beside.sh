# usage: bash benchmarks/device/qkv_beside.sh   (carrying .whl; random weights, no GGUF; ~7 min)
# EAGLE-3's QKV split (2026-12-06, benchmarks/results/2026-12-06-h100-qkv-beside/): each draft forward's mid-layer QKV
# product of its input feature runs on a side stream before its tokens are known (the draft steps' beside the LM
# head and pick before them, the draft extend's, with the head's fc, beside the verify's layers after the last one
# it reads), and each such QKV streams only the embedding's weight columns. The GPU tests, then the shipped state
# against serial_qkv (the fc alone on the side stream, the dual-input QKVs) and serial_fc (no side stream) in
# alternating rounds, then a profile of the cycle with kernel starts.
source benchmarks/device/env.sh >/dev/null
timeout 240 python -m pytest -q -p no:cacheprovider tests/spec/test_fused_gpu.py tests/runtime/test_side_stream.py 2>&1 | tail -1
timeout 120 python -m pytest -q -p no:cacheprovider tests/ops/test_gemv_gpu.py -k eagle3 2>&1 | tail -1
for bs in 1 8; do
  timeout 200 python benchmarks/cycle_variants.py --bs $bs --variants base,serial_qkv,serial_fc --rounds 5 --out $OUT/v-bs$bs 2>&1 \
    | grep -v Warn | tail -3
done
timeout 150 python benchmarks/cycle_profile.py --random-smollm --sizes 1,8 --iters 20 --out $OUT/prof 2>&1 | tail -2

# usage: bash benchmarks/device/side_fc.sh   (carrying .whl; random weights, no GGUF; ~7 min)
# The draft extend's three levers of 2026-12-06 (benchmarks/results/2026-12-06-h100-side-fc/), each timed against the
# shipped state in alternating rounds (cycle_variants.py): the EAGLE-3 fc after the verify's argmax instead of beside
# it (serial_fc), the memset before the fixed-stride extend kernel (zero_fixed_out), the extend's two-block splits
# (short_extend1: no draft extend counts as short); then the GPU tests of the side stream and the extend kernel.
source benchmarks/device/env.sh >/dev/null
for bs in 1 8; do
  timeout 150 python benchmarks/cycle_variants.py --bs $bs --variants base,serial_fc,zero_fixed_out,short_extend1 \
    --rounds 3 --out $OUT/v-bs$bs 2>&1 | grep -v Warn | tail -4
done
timeout 120 python -m pytest -q -p no:cacheprovider tests/spec/test_fused_gpu.py tests/runtime/test_side_stream.py 2>&1 | tail -1
timeout 170 python -m pytest -q -p no:cacheprovider tests/attention/test_triton_gpu.py 2>&1 | tail -1
timeout 120 python -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_graphs.py -k "real_graphs and triton" 2>&1 | tail -1

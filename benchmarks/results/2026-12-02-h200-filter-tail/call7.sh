# call 7 (H200; the GGUF staged by calls 3-6): GPU tests with the default model (engine end to end, graphs), then
# spec / plain in one run (64 mt_bench prompts x 256 tokens at bs 1, 32 at bs 8), greedy and T 0.7 top-p 0.9
R=benchmarks/results/2026-12-02-h200-filter-tail
source $R/env.sh
timeout 250 python -m pytest -q -m gpu -p no:cacheprovider tests/engine/test_gpu_e2e.py tests/runtime/test_gpu_graphs.py 2>&1 | tail -4
timeout 300 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --sizes 1,8 --cost-sizes 1 \
  --variants plain,eagle_adaptive,eagle_s5 --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed > $OUT/speed.log 2>&1
echo "speed rc $?"; grep -E "x |ratio|tok/s" $OUT/speed.log | tail -20

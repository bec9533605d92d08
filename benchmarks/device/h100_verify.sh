# usage: bash benchmarks/device/h100_verify.sh      (carrying .whl; random weights, no GGUF)
# Issue 14's "a 6-token verify <= 1.05x a decode step" on the H100, last measured there at 1.080 / 1.084 on
# 2026-11-27 (`benchmarks/results/2026-11-27-h100-normed-rows/`), before the verify block's L2 prewarm and the
# H200's tunes (1.044-1.047 on the H200, 2026-12-02). First the ratio as shipped (step_pair.py, two rounds,
# SmolLM2 and the 8B shape at bs 1), then the 6-row bucket's launch configs timed in the bs-1 S = 5 cycle
# (tune_in_cycle.py, each GEMM's 6 fastest alone recaptured; scratch cache, nothing stored): its JSON names
# the winners to write into updraft/ops/gemv_tuned.json under the H100's name. ~6 min.
source benchmarks/device/env.sh >/dev/null
mkdir -p /tmp/empty
timeout 200 python benchmarks/step_pair.py --out $OUT/pair --models smollm2,llama8b --batch-sizes 1 --variants base,base \
  2>&1 | grep "verify / decode"
UPDRAFT_CACHE=/tmp/empty timeout 330 python benchmarks/tune_in_cycle.py --bs 1 --rows 6 --prefilter 6 \
  --gemms qkv,o,gate_up,down --iters 20 --out $OUT/tune 2>&1 | grep -v Warn | tail -40

# Call 3 (random SmolLM2 + the shipped head): where the bs-8 verify (48 rows) spends its time against
# the bs-8 decode (kernel profile of each graph, PDL as shipped), then the 48-row bucket's tensor-core
# tiles timed in the bs-8 S = 5 cycle (each GEMM's 6 fastest in isolation, recaptured; the H200 runs
# the H100's entries for this bucket).
R=benchmarks/results/2026-12-02-h200-verify48-tune
source benchmarks/device/env.sh
mkdir -p /tmp/empty
UPDRAFT_CACHE=/tmp/empty timeout 120 python benchmarks/decode_kernels.py --out $OUT/profile --models smollm2 --skip-gemms \
    --variants fused --batch-sizes 8 --peak-bw 4.279e12 2>&1 | grep -v Warn | tail -12
UPDRAFT_CACHE=/tmp/empty timeout 420 python benchmarks/tune_in_cycle.py --bs 8 --rows 48 --tiles dot --prefilter 6 \
    --gemms qkv,o,gate_up,down --iters 20 --out $OUT/tune 2>&1 | grep -v Warn | tail -40

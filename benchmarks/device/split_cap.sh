# usage: bash benchmarks/device/split_cap.sh [512|4096]   (carrying .whl; random weights, no GGUF; ~4 min a context)
# The engine's cap on decode-kernel KV splits (TritonBackend.max_kv_splits, 64): its graphs are captured for its
# max_model_len, so at bs 1 every context runs 64 splits (8 holding keys at 512 tokens) and a 64-split merge tile,
# where step_pair.py's forward graph runs 9 (benchmarks/results/2026-12-06-h100-merge-live-splits/). The S = 5 cycle
# and the plain step at bs 1 and 8 with the cap at 64 (base), 32 and 16, three alternating rounds (cycle_variants.py).
source benchmarks/device/env.sh >/dev/null
ctx=${1:-512}
for bs in 1 8; do
  timeout 280 python benchmarks/cycle_variants.py --bs $bs --context $ctx --variants base,max_splits32,max_splits16 \
    --rounds 3 --out $OUT/cap-bs$bs-$ctx 2>&1 | grep -v Warn | tail -5
done

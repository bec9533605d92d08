# usage: bash benchmarks/device/chain_knobs.sh [CONTEXT [VARIANTS]]   (carrying .whl; random weights, no GGUF; ~2-4 min)
# The draft chain's remaining per-step launches (2026-12-06, benchmarks/results/2026-12-06-h100-assist-beside/): the
# EAGLE-3 head's LM head from its FP8 copy (fp8_head), the draft argmax at 4 warps (argmax_pt64), the draft's
# attention at 8 / 16 KV splits at most (draft_max_splitsN), each against the shipped state in alternating rounds.
source benchmarks/device/env.sh >/dev/null
C=${1:-512}
V=${2:-base,fp8_head,argmax_pt64,draft_max_splits8,draft_max_splits16}
timeout 250 python benchmarks/cycle_variants.py --bs 1 --context $C --variants $V --rounds 5 --out $OUT/c$C-bs1 2>&1 \
  | grep -v Warn | tail -5
timeout 250 python benchmarks/cycle_variants.py --bs 8 --context $C --variants $V --rounds 3 --out $OUT/c$C-bs8 2>&1 \
  | grep -v Warn | tail -5

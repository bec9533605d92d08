# Call 7 (same machine, right after call 6): the bs-8 buckets not yet tuned in the cycle on the H200: the
# EAGLE-3 head's QKV over the draft extend's 48 rows, and the 8-row bucket (the bs-8 plain step and draft
# chain steps; target GEMMs and the head's QKV), each candidate recaptured in the cycle and the plain step.
R=benchmarks/results/2026-12-02-h200-verify48-tune
source benchmarks/device/env.sh
mkdir -p /tmp/empty
UPDRAFT_CACHE=/tmp/empty timeout 150 python benchmarks/tune_in_cycle.py --bs 8 --rows 48 --tiles dot --max 12 \
    --gemms head_qkv --iters 20 --out $OUT/tune_head48 2>&1 | grep -v Warn | tail -14
UPDRAFT_CACHE=/tmp/empty timeout 380 python benchmarks/tune_in_cycle.py --bs 8 --rows 8 --prefilter 5 --max 12 \
    --gemms qkv,o,gate_up,down,head_qkv --iters 20 --out $OUT/tune8 2>&1 | grep -v Warn | grep -v "^  " | tail -8

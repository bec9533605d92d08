# usage: bash benchmarks/device/oproj_fold.sh     (carrying .whl; no model, no staging: random weights)
# benchmarks/oproj_fold_probe.py: the split merge + o_proj + residual add + the post-attention norm's rows in one
# deterministic launch (int64 fixed-point atomics or per-head float32 slices, a ticket a column tile) against
# production's merge_splits + linear_add_norm, SmolLM2 shapes at 1, 6, 8 and 48 token rows (~3 min).
source benchmarks/device/env.sh >/dev/null
timeout 400 python benchmarks/oproj_fold_probe.py --out $OUT/oproj_fold.json 2>&1 | grep -v Warn | tail -70

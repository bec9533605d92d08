# usage: bash benchmarks/device/fold_probe.sh     (carrying .whl; no model, no staging: random weights)
# benchmarks/fold_probe.py: issue 14's two K-split folds (the MLP in one launch, the split merge + o_proj in one),
# each against production's two launches at the SmolLM2 and Llama-3.1-8B shapes, 1-8 token rows; issue 15's MLA
# merge + V up-projection in one launch against merge + bmm + copy (DeepSeek-V2-Lite / V3 heads). Two processes
# with their own limits (~4 + 4 min); each JSON is rewritten after every case, so a cut run keeps what it timed.
source benchmarks/device/env.sh >/dev/null
timeout 260 python benchmarks/fold_probe.py --probes mlp --out $OUT/fold_mlp.json 2>&1 | grep -v Warn | tail -12
timeout 300 python benchmarks/fold_probe.py --probes oproj,mla_uv --out $OUT/fold_attn.json 2>&1 | grep -v Warn | tail -24

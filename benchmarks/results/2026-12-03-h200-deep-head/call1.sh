# Call 1 (carries GGUF part 1 of 4): what a second head layer costs the S = 5 cycle before any training. Random-weight
# SmolLM2 (cycle_variants.py) with the shipped EAGLE-3 head and with the same head grown to two layers (layers.1.*:
# a standard decoder layer, random inputs, zero output projections: the timing does not depend on the values),
# bs 1 and 8 at 512 tokens, the shipped settings.
R=benchmarks/results/2026-12-03-h200-deep-head
source benchmarks/device/env.sh
python - <<'PY'
import json, shutil, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst = Path("updraft/heads/smollm2-135m-instruct-eagle3"), Path("/tmp/deep-random")
shutil.rmtree(dst, ignore_errors=True); dst.mkdir()
t = load_file(str(src / "model.safetensors")); cfg = json.loads((src / "config.json").read_text())
h, i, q, kv = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
g = torch.Generator().manual_seed(0)
r = lambda *s: (torch.randn(*s, generator=g) * 0.02).to(torch.bfloat16)
t.update({"layers.1.self_attn.q_proj.weight": r(q, h), "layers.1.self_attn.k_proj.weight": r(kv, h),
          "layers.1.self_attn.v_proj.weight": r(kv, h), "layers.1.self_attn.o_proj.weight": torch.zeros(h, q, dtype=torch.bfloat16),
          "layers.1.mlp.gate_proj.weight": r(i, h), "layers.1.mlp.up_proj.weight": r(i, h),
          "layers.1.mlp.down_proj.weight": torch.zeros(h, i, dtype=torch.bfloat16),
          "layers.1.input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
          "layers.1.post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16)})
save_file(t, str(dst / "model.safetensors"), metadata={"format": "pt"})
(dst / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=2)))
print("deep-random head written")
PY
for run in "1 one builtin:smollm2" "1 two /tmp/deep-random" "8 one builtin:smollm2" "8 two /tmp/deep-random"; do
  set -- $run
  timeout 90 python benchmarks/cycle_variants.py --bs $1 --context 512 --rounds 3 --variants base --head $3 \
    --out $OUT/bs$1-$2 > $OUT/bs$1-$2.log 2>&1; grep -v Warning $OUT/bs$1-$2.log | tail -2 | sed "s/^/bs $1 $2 layer(s): /"
done

"""Hugging Face transformers as a peer in the same benchmark run: same model, same prompts, greedy.

Modes: ``eager`` (dynamic cache), ``static_compile`` (static cache + ``torch.compile`` of the
forward; CUDA only), ``prompt_lookup`` (assisted generation by n-gram lookup, batch 1 only, the
peer of our n-gram proposer). Batches are left-padded with an attention mask. Every run
generates exactly ``max_new_tokens`` (EOS neither stops nor is masked, as with our ignore_eos), so
tokens/s compare like for like and greedy outputs can be compared token by token.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

PEER_MODES = ("eager", "static_compile", "prompt_lookup")


def load_hf(path: Path, dtype: torch.dtype, device: torch.device) -> Any:
    import transformers

    if path.suffix == ".gguf":
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return model.to(device).eval()


def hf_from_ours(model: torch.nn.Module) -> Any:
    """A transformers Llama with exactly our (random) weights, for models built in-process."""
    import transformers

    c = model.config  # type: ignore[attr-defined]
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling.kind == "llama3":
        s = c.rope_scaling
        rope = {"rope_type": "llama3", "rope_theta": c.rope_theta, "factor": s.factor, "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor, "original_max_position_embeddings": s.original_max_position_embeddings}
    cfg = transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps, max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=c.tie_word_embeddings, rope_parameters=rope,
    )
    w = next(model.parameters())
    with torch.device("meta"):
        hf = transformers.LlamaForCausalLM(cfg)
    hf = hf.to(dtype=w.dtype).to_empty(device=w.device)
    sd = {}
    for name, p in model.state_dict().items():
        if name.endswith("cos_sin"):
            continue
        if ".qkv_proj." in name:
            for part, t in zip("qkv", p.split([c.q_size, c.kv_size, c.kv_size])):
                sd[name.replace("qkv_proj", f"{part}_proj")] = t
        elif ".gate_up_proj." in name:
            g, u = p.chunk(2)
            sd[name.replace("gate_up_proj", "gate_proj")], sd[name.replace("gate_up_proj", "up_proj")] = g, u
        else:
            sd[name] = p
    missing, unexpected = hf.load_state_dict(sd, strict=False, assign=True)
    missing = [m for m in missing if "rotary_emb" not in m and not (c.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"weight transfer to transformers failed: missing {missing[:3]}, unexpected {unexpected[:3]}")
    if c.tie_word_embeddings:
        hf.tie_weights()
    # Built on meta, the rotary inv_freq buffer came back uninitialised from to_empty: rebuild it.
    hf.model.rotary_emb = type(hf.model.rotary_emb)(config=cfg).to(w.device)
    return hf.eval()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_peer(hf: Any, prompts: list[list[int]], max_new_tokens: int, bs: int, mode: str) -> dict[str, Any]:
    """Generate for ``prompts`` in batches of ``bs``; returns tokens/s and the output ids."""
    device = next(hf.parameters()).device
    if mode == "static_compile" and device.type != "cuda":
        return {"skipped": "static cache + torch.compile is measured on CUDA only"}
    if mode == "prompt_lookup" and bs != 1:
        return {"skipped": "assisted generation runs at batch 1 only"}
    # eos_token_id=None: run the full length without masking EOS (min_new_tokens would set its
    # logit to -inf and change the argmax; our ignore_eos only keeps going).
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": False, "eos_token_id": None}
    pad = 0
    kwargs["pad_token_id"] = pad
    if mode == "static_compile":
        kwargs["cache_implementation"] = "static"
        if not getattr(hf, "_updraft_compiled", False):
            hf.forward = torch.compile(hf.forward, mode="reduce-overhead", fullgraph=True)
            hf._updraft_compiled = True
    if mode == "prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = 10
    outs: list[list[int]] = []

    def batches() -> list[list[list[int]]]:
        return [prompts[i : i + bs] for i in range(0, len(prompts), bs)]

    def generate(group: list[list[int]]) -> list[list[int]]:
        width = max(len(p) for p in group)
        ids = torch.full((len(group), width), pad, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for i, p in enumerate(group):  # left padding
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        with torch.no_grad():
            out = hf.generate(ids.to(device), attention_mask=mask.to(device), **kwargs)
        return [row[width:].tolist() for row in out]

    generate(batches()[0])  # warm-up (compilation happens here)
    _sync(device)
    t0 = time.perf_counter()
    for group in batches():
        outs.extend(generate(group))
    _sync(device)
    wall = time.perf_counter() - t0
    tokens = sum(len(o) for o in outs)
    return {"mode": mode, "batch_size": bs, "output_tokens": tokens, "wall_s": wall, "output_tok_s": tokens / wall, "outputs": outs}


def agreement(ours: list[list[int]], theirs: list[list[int]]) -> dict[str, float]:
    """Greedy agreement: share of identical outputs and mean common-prefix fraction."""
    same = sum(a == b for a, b in zip(ours, theirs))
    prefix = []
    for a, b in zip(ours, theirs):
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prefix.append(n / max(1, max(len(a), len(b))))
    return {"identical": same / max(1, len(ours)), "mean_common_prefix": sum(prefix) / max(1, len(prefix))}

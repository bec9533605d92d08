"""New draft heads for a target, their draft vocabulary, and saving them in the published layout.

A head is built from the same classes the engine serves (``EagleHead`` / ``Eagle3Head``) so the
trained parameters need no conversion; ``save_head`` writes a Hugging Face folder that
``updraft.models.eagle.load_draft_head`` (and other engines' EAGLE loaders) read:

* EAGLE-1 (``LlamaForCausalLMEagle``): ``fc.weight``, ``fc.bias``, ``layers.N.*`` with q/k/v and
  gate/up as separate matrices, no input norm on layer 0; optionally ``embed_tokens.weight`` (a
  copy of the target's, as the published EAGLE-1 heads carry; off by default: the loader shares
  the target's embedding when the checkpoint has none). The LM head stays the target's.
* EAGLE-3 (``LlamaForCausalLMEagle3``): ``fc.weight`` (3h -> h, no bias), ``midlayer.*``
  (with ``hidden_norm``), ``norm.weight``, ``lm_head.weight`` over the draft vocabulary,
  ``d2t`` (int64, target id = draft id + d2t[draft id]) and ``t2d`` (bool over the target
  vocabulary); ``draft_vocab_size`` and the aux layer ids in ``config.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from updraft.models.config import ModelConfig
from updraft.models.eagle import DraftHeadConfig, Eagle3Head, EagleHead
from updraft.models.llama import LlamaForCausalLM

Head = EagleHead | Eagle3Head
ARCH = {"eagle": "LlamaForCausalLMEagle", "eagle3": "LlamaForCausalLMEagle3"}


def head_hf_config(
    method: str, target: ModelConfig, draft_vocab_size: int | None = None, aux_layers: tuple[int, ...] | None = None,
    num_layers: int = 1, intermediate_size: int | None = None,
) -> dict[str, Any]:
    """``config.json`` of a head for ``target``: the target's width, heads and RoPE, its MLP size
    unless ``intermediate_size`` says otherwise (a wider head: more capacity at the same launch
    count); ``num_layers`` decoder layers (EAGLE-3: the mid layer and ``num_layers - 1`` standard
    layers after it)."""
    if method not in ARCH:
        raise ValueError(f"method={method!r}: expected eagle or eagle3")
    rope: dict[str, Any] | None = None
    sc = target.rope_scaling
    if sc.kind == "linear":
        rope = {"rope_type": "linear", "factor": sc.factor}
    elif sc.kind == "llama3":
        rope = {
            "rope_type": "llama3", "factor": sc.factor, "low_freq_factor": sc.low_freq_factor,
            "high_freq_factor": sc.high_freq_factor, "original_max_position_embeddings": sc.original_max_position_embeddings,
        }
    cfg: dict[str, Any] = {
        "architectures": [ARCH[method]],
        "model_type": "llama",
        "hidden_size": target.hidden_size,
        "target_hidden_size": target.hidden_size,
        "intermediate_size": int(intermediate_size or target.intermediate_size),
        "num_hidden_layers": num_layers,
        "num_attention_heads": target.num_heads,
        "num_key_value_heads": target.num_kv_heads,
        "head_dim": target.head_dim,
        "hidden_act": "silu",
        "vocab_size": target.vocab_size,
        "max_position_embeddings": target.max_position_embeddings,
        "rms_norm_eps": target.rms_norm_eps,
        "rope_theta": target.rope_theta,
        "rope_scaling": rope,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "bias": method == "eagle",  # fc bias: EAGLE-1 has one, EAGLE-3 not
    }
    if target.bos_token_id is not None:
        cfg["bos_token_id"] = target.bos_token_id
    if target.eos_token_ids:
        cfg["eos_token_id"] = list(target.eos_token_ids)
    if method == "eagle3":
        cfg["draft_vocab_size"] = int(draft_vocab_size or target.vocab_size)
        if aux_layers is not None:
            # vLLM / SGLang read the layer ids from here; updraft too (DraftHeadConfig.from_hf).
            cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [int(i) for i in aux_layers]}
    return cfg


def select_draft_vocab(counts: torch.Tensor, size: int, first: torch.Tensor | None = None) -> torch.Tensor:
    """The ``size`` most frequent token ids (ties: lower id first), sorted ascending. Tokens never
    seen fill the rest in id order when fewer than ``size`` were seen. ``first`` (ids, e.g. a
    warm-started head's vocabulary) ranks ahead of every other id, most frequent first among them:
    a larger vocabulary keeps all of them, a smaller one their most frequent."""
    vocab = counts.numel()
    size = min(size, vocab)
    ids = torch.arange(vocab)
    key = -counts.double()
    if first is not None:
        # counts are >= 0, so one more than the largest count puts every `first` id ahead.
        key[first.long().cpu()] -= float(counts.double().max().item()) + 1.0
    # Stable: sort by id, then by the key (argsort stable keeps id order for ties).
    order = torch.argsort(key, stable=True)
    return ids[order[:size]].sort().values


def vocab_maps(draft_ids: torch.Tensor, target_vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(d2t, t2d)``: offsets with ``target = draft + d2t[draft]`` and the membership mask."""
    d2t = draft_ids.long() - torch.arange(draft_ids.numel())
    t2d = torch.zeros(target_vocab, dtype=torch.bool)
    t2d[draft_ids.long()] = True
    return d2t, t2d


def new_head(
    method: str, target: LlamaForCausalLM, *, draft_ids: torch.Tensor | None = None,
    aux_layers: tuple[int, ...] | None = None, seed: int = 0, device: torch.device | str = "cpu",
    intermediate_size: int | None = None, num_layers: int = 1,
) -> tuple[Head, dict[str, Any]]:
    """A freshly initialised head (float32, on ``device``) bound to ``target``, and its config.

    Initialisation: PyTorch's defaults for the linears (seeded), ones for the norms; EAGLE-3's
    ``lm_head`` starts as the target's LM head rows of the draft vocabulary and its ``norm`` as
    the target's final norm, so its first logits already look like the target's."""
    tcfg = target.config
    if method == "eagle3" and draft_ids is None:
        draft_ids = torch.arange(tcfg.vocab_size)
    if num_layers < 1:
        raise ValueError(f"num_layers={num_layers} must be >= 1")
    cfg = head_hf_config(method, tcfg, None if draft_ids is None else int(draft_ids.numel()), aux_layers,
                         num_layers=num_layers, intermediate_size=intermediate_size)
    hc = DraftHeadConfig.from_hf(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head: Head = EagleHead(hc) if method == "eagle" else Eagle3Head(hc)
    head.shared._target.append(target)
    head.to(device=device, dtype=torch.float32)
    if isinstance(head, Eagle3Head):
        assert draft_ids is not None
        d2t, _ = vocab_maps(draft_ids.cpu(), tcfg.vocab_size)
        with torch.no_grad():
            head.d2t = d2t.to(device)
            head.lm_head.weight.copy_(target.lm_head_weight[draft_ids.to(target.lm_head_weight.device)].float())
            head.norm.weight.copy_(target.model.norm.weight.float())
    head.rotary.build(torch.device(device), torch.float32)
    return head, cfg


def resize_draft_vocab(
    src: Eagle3Head, target: LlamaForCausalLM, draft_ids: torch.Tensor, aux_layers: tuple[int, ...] | None,
    seed: int = 0, device: torch.device | str = "cpu",
) -> tuple[Eagle3Head, dict[str, Any]]:
    """A copy of ``src`` over another draft vocabulary (target ids ``draft_ids``, any size): a
    token ``src`` has keeps its trained LM-head row (its logit is unchanged), a new one starts from
    a zero row (logit 0); every other weight is ``src``'s.

    Hazard: the target's rows, which a new head starts from, are the wrong scale for a trained
    head's feature: grown from 8,192 to 16,384 tokens, SmolLM2's shipped head drafted the right
    first token 0.09 of the time after its first step (0.74 at its own size, 0.72 from zero rows).
    A zero row never outranks a confident trained token, so the grown head starts where its source
    was."""
    src_ids = src.vocab_ids().cpu()
    head, cfg = new_head("eagle3", target, draft_ids=draft_ids, aux_layers=aux_layers, seed=seed, device=device,
                         intermediate_size=src.config.intermediate_size, num_layers=src.config.num_layers)
    assert isinstance(head, Eagle3Head)
    weights = {k: v for k, v in src.state_dict().items() if k in head.state_dict()}
    rows = torch.zeros_like(head.lm_head.weight)
    at = torch.full((int(target.config.vocab_size),), -1, dtype=torch.long)
    at[src_ids] = torch.arange(src_ids.numel())
    kept = at[draft_ids.long().cpu()]
    has = kept >= 0
    rows[has.to(rows.device)] = src.lm_head.weight.detach()[kept[has].to(src.lm_head.weight.device)].to(rows)
    weights["lm_head.weight"] = rows
    weights["d2t"] = head.d2t.clone()
    head.load_state_dict(weights, strict=True)
    return head, cfg


def published_state_dict(head: Head) -> dict[str, torch.Tensor]:
    """The head's tensors under the published names: fused qkv / gate_up split back into
    q/k/v and gate/up; the target's shared weights and the RoPE table left out."""
    out: dict[str, torch.Tensor] = {}
    splits = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    modules = dict(head.named_modules())
    for name, t in head.state_dict().items():
        if name.startswith("shared.") or name.startswith("rotary."):
            continue
        parts = name.split(".")
        if len(parts) >= 2 and parts[-2] in splits:
            module = modules[".".join(parts[:-1])]
            pieces = t.split(module.shard_sizes, dim=0)  # type: ignore[attr-defined]
            for new, piece in zip(splits[parts[-2]], pieces):
                out[".".join(parts[:-2] + [new, parts[-1]])] = piece
            continue
        out[name] = t
    return out


#: Weight files of a head folder: one ``model.safetensors`` or shards with an index (HF names).
SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"


def _shards(tensors: dict[str, torch.Tensor], max_bytes: int | None) -> list[dict[str, torch.Tensor]]:
    """Tensors grouped in file order into shards of at most ``max_bytes`` (a larger tensor alone);
    one shard when ``max_bytes`` is None or everything fits."""
    groups: list[dict[str, torch.Tensor]] = [{}]
    used = 0
    for name in sorted(tensors):
        t = tensors[name]
        size = t.numel() * t.element_size()
        if max_bytes is not None and groups[-1] and used + size > max_bytes:
            groups.append({})
            used = 0
        groups[-1][name] = t
        used += size
    return groups


def write_weights(folder: Path, tensors: dict[str, torch.Tensor], max_bytes: int | None = None) -> list[str]:
    """Write ``tensors`` as ``model.safetensors``, or, when they exceed ``max_bytes``, as
    ``model-0000K-of-0000N.safetensors`` shards of at most ``max_bytes`` each plus
    ``model.safetensors.index.json`` (the Hugging Face layout; updraft's loader and other engines
    read either). Each file goes to a temporary name first; weight files of an earlier save that
    the new set does not overwrite are removed (a loader reads every ``*.safetensors`` there).
    Returns the weight file names."""
    groups = _shards(tensors, max_bytes)
    n = len(groups)
    names = [SINGLE] if n == 1 else [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    for name, group in zip(names, groups):
        tmp = folder / f".{name}.tmp"
        save_file(group, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, folder / name)
    stale = [p for p in folder.glob("model*.safetensors") if p.name not in names]
    if n > 1:
        index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
                 "weight_map": {k: name for name, group in zip(names, groups) for k in group}}
        tmp = folder / f".{INDEX}.tmp"
        tmp.write_text(json.dumps(index, indent=2) + "\n")
        os.replace(tmp, folder / INDEX)
    elif (folder / INDEX).exists():
        stale.append(folder / INDEX)
    for p in stale:
        p.unlink()
    return names


def merge_shards(folder: str | Path) -> Path:
    """Rewrite a sharded head folder as one ``model.safetensors`` (e.g. to ship it); a folder
    with one file already is left as it is."""
    from safetensors.torch import load_file

    folder = Path(folder)
    shards = sorted(folder.glob("model-*-of-*.safetensors"))
    if shards:
        merged: dict[str, torch.Tensor] = {}
        for p in shards:
            merged.update(load_file(str(p)))
        write_weights(folder, merged, None)
    return folder / SINGLE


def save_head(
    head: Head, cfg: dict[str, Any], folder: str | Path, dtype: torch.dtype = torch.bfloat16, include_embedding: bool = False,
    max_file_bytes: int | None = None,
) -> Path:
    """Write ``config.json`` + the weights (floating tensors in ``dtype``) into ``folder``: one
    ``model.safetensors``, or shards of at most ``max_file_bytes`` (``write_weights``); each file
    is written to a temporary name and renamed, so a reader never sees a half-written head.
    ``include_embedding`` (EAGLE-1): also store a copy of the target's embedding as
    ``embed_tokens.weight``, as the original EAGLE-1 checkpoints do; without it the loader shares
    the target's (for SmolLM2-135M the copy would be 56 MB of the 64 MB)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sd = published_state_dict(head)
    tensors = {k: (v.to(dtype) if v.is_floating_point() else v).detach().contiguous().cpu() for k, v in sd.items()}
    target = head.shared._target[0]
    if isinstance(head, EagleHead):
        if include_embedding:
            tensors["embed_tokens.weight"] = target.model.embed_tokens.weight.detach().to(dtype).contiguous().cpu()
    else:
        _, t2d = vocab_maps(head.vocab_ids().cpu(), target.config.vocab_size)
        tensors["t2d"] = t2d
        tensors["d2t"] = head.d2t.detach().long().cpu()
    cfg = dict(cfg, torch_dtype=str(dtype).removeprefix("torch."))
    write_weights(folder, tensors, max_file_bytes)
    tmp_cfg = folder / ".config.json.tmp"
    tmp_cfg.write_text(json.dumps(cfg, indent=2) + "\n")
    os.replace(tmp_cfg, folder / "config.json")
    return folder


def main(argv: list[str] | None = None) -> int:
    """``python -m updraft.train.heads merge DIR``: one ``model.safetensors`` from a sharded head."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m updraft.train.heads")
    p.add_argument("command", choices=["merge"])
    p.add_argument("folder")
    args = p.parse_args(argv)
    print(merge_shards(args.folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

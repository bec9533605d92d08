"""A tiny random engine for the kit's production-runner checks: a Llama target built in-process
(no checkpoint, no tokenizer) and an EAGLE / EAGLE-3 head written to a folder in the published
key layout (or an MTP head in DeepSeek-V3's), served by the real ``Engine`` (memory, runners, speculative worker, graph capture).

Nothing here is numerically meaningful; the weights only need to be random enough that rows and
requests differ (N(0, 0.08) matrices, norms near 1, as the unit tests' tiny checkpoints).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.models.config import ModelConfig
from updraft.models.llama import LlamaForCausalLM
from updraft.models.loader import LoadedModel


@dataclass(frozen=True)
class TinyShape:
    vocab: int = 320
    hidden: int = 64
    intermediate: int = 96
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    max_positions: int = 512


class _NoTokenizer:
    """The engine reads only ``eos_token_ids`` when prompts are token ids and detokenize=False."""

    eos_token_ids: tuple[int, ...] = ()


def _randomize(module: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)
            else:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))


def tiny_target(shape: TinyShape, device: torch.device, dtype: torch.dtype, seed: int = 0,
                layer_scale: float = 1.0) -> LoadedModel:
    """A random Llama target as a ``LoadedModel`` (the engine's loader output). ``layer_scale``
    scales what each layer adds to the residual stream (o_proj, down_proj): below 1 the next
    token leans on the current one (see ``write_head``'s ``agreeing``)."""
    cfg = ModelConfig(
        family="llama",
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_layers=shape.layers,
        num_heads=shape.heads,
        num_kv_heads=shape.kv_heads,
        head_dim=shape.hidden // shape.heads,
        max_position_embeddings=shape.max_positions,
    )
    model = LlamaForCausalLM(cfg)
    _randomize(model, torch.Generator().manual_seed(seed))
    _scale_outputs(model.named_parameters(), layer_scale)
    model.to(device=device, dtype=dtype).eval()
    model.post_load()
    return LoadedModel(model, cfg, _NoTokenizer(), Path("<kit tiny target>"), {})  # type: ignore[arg-type]


def _scale_outputs(params: Iterable[tuple[str, torch.Tensor]], scale: float) -> None:
    with torch.no_grad():
        for name, p in params:
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(scale)


def _head_config(shape: TinyShape, arch: str, **extra: object) -> dict:
    cfg = {
        "architectures": [arch],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "vocab_size": shape.vocab,
        "max_position_embeddings": shape.max_positions,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    }
    cfg.update(extra)
    return cfg


def _layer(prefix: str, shape: TinyShape, in_dim: int, gen: torch.Generator, input_norm: bool) -> dict[str, torch.Tensor]:
    h, hd = shape.hidden, shape.hidden // shape.heads

    def w(*dims: int) -> torch.Tensor:
        return torch.randn(*dims, generator=gen) * 0.08

    t = {
        f"{prefix}.self_attn.q_proj.weight": w(shape.heads * hd, in_dim),
        f"{prefix}.self_attn.k_proj.weight": w(shape.kv_heads * hd, in_dim),
        f"{prefix}.self_attn.v_proj.weight": w(shape.kv_heads * hd, in_dim),
        f"{prefix}.self_attn.o_proj.weight": w(h, shape.heads * hd),
        f"{prefix}.mlp.gate_proj.weight": w(shape.intermediate, h),
        f"{prefix}.mlp.up_proj.weight": w(shape.intermediate, h),
        f"{prefix}.mlp.down_proj.weight": w(h, shape.intermediate),
        f"{prefix}.post_attention_layernorm.weight": 1 + 0.1 * torch.randn(h, generator=gen),
    }
    if input_norm:
        t[f"{prefix}.input_layernorm.weight"] = 1 + 0.1 * torch.randn(h, generator=gen)
    return t


#: MTP modules of the kit's MTP head: with the default S = 3, step 2 cycles back to module 0.
MTP_MODULES = 2


def _mtp_tensors(shape: TinyShape, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """``MTP_MODULES`` random modules in DeepSeek-V3's key layout (``updraft.models.mtp_formats``)."""
    h, t = shape.hidden, {}
    for m in range(MTP_MODULES):
        p = f"model.layers.{shape.layers + m}"
        for norm in ("enorm", "hnorm", "shared_head.norm"):
            t[f"{p}.{norm}.weight"] = 1 + 0.1 * torch.randn(h, generator=gen)
        t[f"{p}.eh_proj.weight"] = torch.randn(h, 2 * h, generator=gen) * 0.08
        t.update(_layer(p, shape, h, gen, input_norm=True))
    return t


def write_head(folder: Path, shape: TinyShape, kind: str = "eagle", seed: int = 1, agreeing: float | None = None) -> Path:
    """An EAGLE-1 (``kind="eagle"``), EAGLE-3 (``"eagle3"``, draft vocabulary of 3/4 of the
    target's) or MTP (``"mtp"``, ``MTP_MODULES`` modules) head folder: ``config.json`` +
    ``model.safetensors`` (``pytorch_model.bin`` without safetensors; not for MTP).

    ``agreeing`` (EAGLE-1 only): a head whose drafts the target often accepts, so that accepted
    lengths vary (a random head's greedy drafts almost never match). Its ``fc`` passes the token
    embedding through (scaled to the rms of a normalised hidden state) plus ``agreeing`` times its
    usual part of the target's feature, and its layer adds ``agreeing`` times the usual amount. With a target whose layers
    are scaled alike (``tiny_target``'s ``layer_scale``), both predict mostly from the current
    token: the draft at position i reads token i + 1, as the target does at i + 1."""
    gen = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    h = shape.hidden
    if kind == "eagle":
        cfg = _head_config(shape, "LlamaForCausalLMEagle")
        t = {"fc.weight": torch.randn(h, 2 * h, generator=gen) * 0.08, "fc.bias": torch.zeros(h)}
        t.update(_layer("layers.0", shape, h, gen, input_norm=False))
        if agreeing is not None:
            # embeddings are N(0, 0.08): rms 1 after this; the feature keeps a small part (its rows
            # must still matter, or a draft extend fed the wrong feature would go unseen)
            t["fc.weight"] = torch.cat([torch.eye(h) / 0.08, t["fc.weight"][:, h:] * agreeing], dim=1)
            _scale_outputs(t.items(), agreeing)
    elif kind == "eagle3" and agreeing is None:
        draft_vocab = shape.vocab * 3 // 4
        cfg = _head_config(shape, "LlamaForCausalLMEagle3", draft_vocab_size=draft_vocab)
        keep = torch.randperm(shape.vocab, generator=gen)[:draft_vocab].sort().values
        t = {"fc.weight": torch.randn(h, 3 * h, generator=gen) * 0.08}
        t.update(_layer("midlayer", shape, 2 * h, gen, input_norm=True))
        t["midlayer.hidden_norm.weight"] = 1 + 0.1 * torch.randn(h, generator=gen)
        t["norm.weight"] = torch.ones(h)
        t["lm_head.weight"] = torch.randn(draft_vocab, h, generator=gen) * 0.08
        t["d2t"] = keep - torch.arange(draft_vocab)
        t2d = torch.zeros(shape.vocab, dtype=torch.bool)
        t2d[keep] = True
        t["t2d"] = t2d
    elif kind == "mtp" and agreeing is None:
        cfg = _head_config(shape, "LlamaForCausalLM", num_hidden_layers=shape.layers, num_nextn_predict_layers=MTP_MODULES)
        t = _mtp_tensors(shape, gen)
    else:
        raise ValueError(f"head kind {kind!r} is not 'eagle', 'eagle3' or 'mtp' (agreeing: EAGLE-1 only)")
    try:
        from safetensors.torch import save_file

        save_file(t, str(folder / "model.safetensors"))
    except ImportError:  # the loader also reads pytorch_model*.bin
        torch.save(t, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def tiny_engine(
    backend: str,
    draft_extend: str,
    device: torch.device,
    head_dir: Path,
    *,
    kind: str = "eagle",
    dtype: str = "float32",
    num_steps: int = 3,
    page_size: int = 16,
    capture_max_bs: int = 4,
    max_requests: int = 10,
    max_model_len: int = 64,
    shape: TinyShape | None = None,
    disable_graph_phase: list[str] | None = None,
    agreeing: float | None = None,
    adaptive: bool = True,
) -> Engine:
    """An engine over the tiny target with an EAGLE head (written into ``head_dir``), graphs
    captured for bs ``capture_sizes(capture_max_bs)`` (real CUDA graphs on cuda, the emulator on
    cpu), ``num_steps`` drafts per iteration and v1 or v2 draft extend. The context is short
    (``max_model_len``) so a request can sit at the end of its table row (failure class 11).
    ``agreeing``: target layers and an EAGLE-1 head scaled so that drafts are often accepted
    (``write_head``); ``adaptive``: S chosen per iteration (else always ``num_steps``)."""
    shape = shape or TinyShape()
    loaded = tiny_target(shape, device, {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype],
                         layer_scale=1.0 if agreeing is None else agreeing)
    write_head(head_dir, shape, kind, agreeing=agreeing)
    cfg = EngineConfig(
        model="<kit tiny target>",
        device=device.type,
        dtype=dtype,
        attention_backend=backend,
        page_size=page_size,
        max_running_requests=max_requests,
        max_model_len=max_model_len,
        max_total_tokens=4096,
        cuda_graph_max_bs=capture_max_bs,
        graph_emulate=device.type == "cpu",
        disable_graph_phase=disable_graph_phase or None,
        progress=False,
        speculative=SpeculativeConfig(method=kind, draft_model=str(head_dir), num_steps=num_steps, draft_extend=draft_extend,
                                      adaptive=adaptive),
    )
    return Engine(cfg, loaded=loaded)

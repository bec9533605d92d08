"""Multi-token-prediction (MTP) layers of DeepSeek checkpoints, handed to an MTP drafter.

A config with ``num_nextn_predict_layers = n`` may carry n MTP layers after the L target layers,
``model.layers.{L+i}.*`` for i < n. Names relative to that prefix:

====================================  ====================  =========================================
``enorm.weight``                      [hidden]              RMSNorm of the next token's embedding
``hnorm.weight``                      [hidden]              RMSNorm of the previous step's hidden state
``eh_proj.weight``                    [hidden, 2 * hidden]  over ``cat(enorm(embed), hnorm(hidden))``
``embed_tokens.weight``               [vocab, hidden]       (published checkpoints: the target's, copied)
``shared_head.norm.weight``           [hidden]              final norm before the head
``shared_head.head.weight``           [vocab, hidden]       (published checkpoints: the target's head)
a decoder layer's names               see ``deepseek.py``   ``input_layernorm.weight``, ``self_attn.*``,
                                                            ``mlp.*`` (MoE where layer L+i is one)
====================================  ====================  =========================================

The drafter's config is ``mtp_model_config(cfg)`` (one layer per MTP layer, KV layer ids from
0, dense/MoE as in the checkpoint); it builds ``DeepseekDecoderLayer(mtp_cfg, i)`` and fills it
with ``load_layer_weights(layer, decoder_part)`` (``split_mtp_state`` separates the two parts);
the layer permutes its rope rows and builds its absorbed weights there, as the target's do.
Some published files omit the copies of ``embed_tokens`` / ``shared_head.head``: a drafter
should fall back to the target's. The target model skips all of these names.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from updraft.errors import CheckpointError
from updraft.models.config import ModelConfig
from updraft.models.deepseek import DeepseekDecoderLayer, load_layer_weights
from updraft.models.deepseek_config import mtp_model_config
from updraft.models.layers import RotaryEmbedding
from updraft.models.loader import open_safetensors, safetensors_files

#: The MTP layer's own tensors (everything else under its prefix is a decoder layer's).
MTP_OWN_NAMES = (
    "enorm.weight", "hnorm.weight", "eh_proj.weight", "embed_tokens.weight", "shared_head.norm.weight", "shared_head.head.weight",
)


def _mtp_index(name: str, cfg: ModelConfig) -> tuple[int, str] | None:
    """(i, name relative to MTP layer i) for an MTP layer's tensor, else None."""
    parts = name.split(".", 3)
    if len(parts) != 4 or parts[:2] != ["model", "layers"] or not parts[2].isdigit():
        return None
    assert cfg.deepseek is not None
    i = int(parts[2]) - cfg.num_layers
    return (i, parts[3]) if 0 <= i < cfg.deepseek.num_nextn_predict_layers else None


def load_mtp_state(
    source: str | Path | Iterable[tuple[str, torch.Tensor]],
    cfg: ModelConfig,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
) -> dict[int, dict[str, torch.Tensor]]:
    """The MTP layers' tensors: ``{i: {name relative to model.layers.{L+i}: tensor}}``, read from a
    Hugging Face folder (only those tensors are read) or an iterable of (name, tensor);
    floating tensors cast to ``dtype`` (default: kept) on ``device``. Empty when the
    checkpoint has none."""
    if cfg.deepseek is None:
        raise ValueError(f"{cfg.architecture} has no multi-token-prediction layers (not a DeepSeek config)")
    out: dict[int, dict[str, torch.Tensor]] = {}

    def put(where: tuple[int, str], t: torch.Tensor) -> None:
        if t.is_floating_point() and dtype is not None:
            t = t.to(dtype)
        out.setdefault(where[0], {})[where[1]] = t.to(device)

    if isinstance(source, (str, Path)):
        for file in safetensors_files(Path(source)):
            with open_safetensors(file) as f:
                for name in f.keys():
                    if (where := _mtp_index(name, cfg)) is not None:
                        put(where, f.get_tensor(name))
    else:
        for name, tensor in source:
            if (where := _mtp_index(name, cfg)) is not None:
                put(where, tensor)
    return dict(sorted(out.items()))


def split_mtp_state(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One MTP layer's tensors as (its own, ``MTP_OWN_NAMES``; the decoder layer's)."""
    own = {n: t for n, t in state.items() if n in MTP_OWN_NAMES}
    return own, {n: t for n, t in state.items() if n not in MTP_OWN_NAMES}


def mtp_checkpoint_shapes(cfg: ModelConfig, i: int) -> dict[str, tuple[int, ...]]:
    """Names (relative to ``model.layers.{L+i}``) and shapes of MTP layer i, as published."""
    with torch.device("meta"):
        layer = DeepseekDecoderLayer(mtp_model_config(cfg), i)
    h, v = cfg.hidden_size, cfg.vocab_size
    own = {"enorm.weight": (h,), "hnorm.weight": (h,), "eh_proj.weight": (h, 2 * h), "embed_tokens.weight": (v, h),
           "shared_head.norm.weight": (h,), "shared_head.head.weight": (v, h)}
    return own | layer.checkpoint_shapes()


def random_mtp_state(
    cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str, *, std: float = 0.02, seed: int = 0
) -> dict[int, dict[str, torch.Tensor]]:
    """Random MTP layers in ``load_mtp_state``'s form (random-weight benchmark models): matrices
    ~ N(0, std), vectors 1 (norm weights; a noaux_tc bias of ones changes no choice)."""
    assert cfg.deepseek is not None
    gen = torch.Generator(device=device).manual_seed(seed)
    out: dict[int, dict[str, torch.Tensor]] = {}
    for i in range(cfg.deepseek.num_nextn_predict_layers):
        state = {}
        for name, shape in mtp_checkpoint_shapes(cfg, i).items():
            t = torch.empty(shape, dtype=torch.float32 if name.endswith("e_score_correction_bias") else dtype, device=device)
            state[name] = t.normal_(0, std, generator=gen) if len(shape) > 1 else t.fill_(1.0)
        out[i] = state
    return out


# ---- the MTP drafter's family (``updraft.models.mtp_formats.MTP_FAMILIES``) -----------------
def deepseek_mtp_config(raw: dict[str, Any]) -> ModelConfig:
    """A DeepSeek ``config.json`` -> the shape of its MTP modules (``mtp_model_config``)."""
    return mtp_model_config(ModelConfig.from_hf(raw))


def deepseek_mtp_rotary(cfg: ModelConfig) -> RotaryEmbedding:
    """The modules' rotary: DeepSeek rotates only the shared rope part of q and k."""
    assert cfg.deepseek is not None
    return RotaryEmbedding(cfg.deepseek.mla.qk_rope_head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)


def load_deepseek_mtp(head: nn.Module, sd: dict[str, torch.Tensor], folder: Path) -> None:
    """Fill an ``MtpHead`` of DeepSeek modules from ``mtp_formats``' names: each module's decoder
    layer (``layers.{m}.block.*``) through ``load_layer_weights`` (rope rows permuted, absorbed
    weights built, every slot once), everything else by name with its shape checked."""
    blocks: dict[int, list[tuple[str, torch.Tensor]]] = {}
    own: dict[str, torch.Tensor] = {}
    for name, tensor in sd.items():
        parts = name.split(".", 3)
        if len(parts) == 4 and parts[0] == "layers" and parts[2] == "block" and parts[1].isdigit():
            blocks.setdefault(int(parts[1]), []).append((parts[3], tensor))
        else:
            own[name] = tensor
    expected = {n: p for n, p in head.named_parameters() if ".block." not in n}
    unexpected = sorted(set(own) - set(expected))
    missing = sorted(set(expected) - set(own))
    if unexpected or missing:
        what = f"unexpected tensor {unexpected[0]!r}" if unexpected else f"missing tensor {missing[0]!r}"
        raise CheckpointError(f"{folder}: DeepSeek MTP modules: {what}")
    with torch.no_grad():
        for name, tensor in own.items():
            dst = expected[name]
            if tuple(dst.shape) != tuple(tensor.shape):
                raise CheckpointError(f"{folder}: {name} has shape {tuple(tensor.shape)}, expected {tuple(dst.shape)}")
            dst.copy_(tensor)
    for m, module in enumerate(head.layers):  # type: ignore[arg-type]
        try:
            load_layer_weights(module.block, blocks.get(m, []))
        except ValueError as exc:
            raise CheckpointError(f"{folder}: MTP module {m}: {exc}") from None

"""MTP checkpoints: DeepSeek-V3's key layout, read from a target checkpoint or a head folder.

A checkpoint's MTP modules live after its main layers: ``config.json`` has ``num_hidden_layers``
``L`` and ``num_nextn_predict_layers`` ``K``; module ``m`` is ``model.layers.{L + m}.*``:

=========================================  ======================================================
checkpoint tensor (module ``m``)           ``MtpHead`` parameter
=========================================  ======================================================
``enorm.weight``, ``hnorm.weight``         ``layers.{m}.enorm.weight``, ``layers.{m}.hnorm.weight``
``eh_proj.weight`` [h, 2h]                 ``layers.{m}.eh_proj.weight`` (input: enorm(emb) ‖ hnorm(h))
``shared_head.norm.weight``                ``layers.{m}.shared_head.norm.weight``
``shared_head.head.weight`` (optional)     ``layers.{m}.shared_head.head.weight`` (absent: the target's LM head)
``embed_tokens.weight`` (optional)         module 0's: the head's embedding (DeepSeek stores a copy per
                                           module; later copies are skipped, as vLLM does); absent: the target's
anything else (the decoder layer)          ``layers.{m}.block.*`` (the layer factory's own names)
=========================================  ======================================================

Everything else in the files (the main model's weights, modules past the ones in use) is not
read. Our own heads for Llama-family targets use exactly this layout on a Llama config (a
folder with only the MTP tensors, ``docs/draft-heads.md``), so the same loader reads a target
checkpoint's own modules and a separate head folder. ``"mtp_cycle": false`` in the config
refuses S > K (``updraft.spec.setup``).

Families: ``MTP_FAMILIES`` maps a config's family to how its modules are built (config parser,
decoder layer, rotary, weight loader); the Llama family is here, DeepSeek plugs in beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from updraft.errors import CheckpointError, ModelNotFoundError
from updraft.models.config import SUPPORTED_ARCHITECTURES, ModelConfig, UnsupportedArchitectureError
from updraft.models.eagle import _fuse_into
from updraft.models.layers import Linear
from updraft.models.llama import LlamaDecoderLayer, LlamaForCausalLM
from updraft.models.mtp import LayerFactory, MtpHead, MtpHeadConfig, default_rotary

#: Tensors of a module that belong to the MTP wrapper, not to its decoder layer.
_MODULE_OWN = ("enorm.", "hnorm.", "eh_proj.", "shared_head.")
#: ``mtp_param_name`` for tensors a loader reads past (a later module's copy of the embedding).
SKIP = ""


def _fused_loader(head: nn.Module, sd: dict[str, torch.Tensor], folder: Path) -> None:
    """Llama-style layers: q/k/v and gate/up are stacked on load (``eagle._fuse_into``)."""
    _fuse_into(head, sd, dict(head.state_dict()), folder)


@dataclass(frozen=True)
class MtpFamily:
    """How the MTP modules of one model family are built and loaded."""

    parse: Callable[[dict[str, Any]], ModelConfig]  # the checkpoint's config.json -> layer shape
    layer: LayerFactory  # layer_factory(cfg, layer_id) -> decoder layer
    rotary: Callable[[ModelConfig], nn.Module] = default_rotary
    load: Callable[[nn.Module, dict[str, torch.Tensor], Path], None] = _fused_loader


def _llama_config(cfg: dict[str, Any]) -> ModelConfig:
    return ModelConfig.from_hf(cfg)


_LLAMA = MtpFamily(_llama_config, LlamaDecoderLayer)
#: config.json's model_type (or the family of its Llama-family architecture) -> MtpFamily
#: (DeepSeek's "deepseek_v2" / "deepseek_v3" join on first use: ``mtp_family``).
MTP_FAMILIES: dict[str, MtpFamily] = {"llama": _LLAMA, "mistral": _LLAMA, "qwen2": _LLAMA, "qwen3": _LLAMA}


def mtp_family(key: str) -> MtpFamily | None:
    """The family of a config's ``model_type`` (DeepSeek's is imported on first use: its model
    code imports the checkpoint loader, which imports this module)."""
    if key in ("deepseek_v2", "deepseek_v3") and key not in MTP_FAMILIES:
        from updraft.models.deepseek import DeepseekDecoderLayer
        from updraft.models.deepseek_mtp import (
            deepseek_mtp_config,
            deepseek_mtp_rotary,
            load_deepseek_mtp,
        )

        MTP_FAMILIES[key] = MtpFamily(deepseek_mtp_config, DeepseekDecoderLayer, deepseek_mtp_rotary, load_deepseek_mtp)
    return MTP_FAMILIES.get(key)


def num_mtp_modules(cfg: dict[str, Any]) -> int:
    """``num_nextn_predict_layers`` of a config (0: no MTP modules)."""
    k = cfg.get("num_nextn_predict_layers") or 0
    if not isinstance(k, int) or k < 0:
        raise CheckpointError(f"num_nextn_predict_layers={k!r} is invalid: must be an integer >= 0")
    return k


def mtp_param_name(name: str, start: int, count: int) -> str | None:
    """Our parameter name for checkpoint tensor ``name`` when it belongs to one of the first
    ``count`` MTP modules (module ``m`` = ``model.layers.{start + m}``); ``SKIP`` for a later
    module's embedding copy; None for anything else (main-model weights, unused modules)."""
    n = name.removeprefix("model.")
    if not n.startswith("layers."):
        return None
    index, _, rest = n.removeprefix("layers.").partition(".")
    if not index.isdigit() or not rest:
        return None
    m = int(index) - start
    if not 0 <= m < count:
        return None
    if rest.startswith("embed_tokens."):
        return "shared.own_embed." + rest.removeprefix("embed_tokens.") if m == 0 else SKIP
    if rest.startswith(_MODULE_OWN):
        return f"layers.{m}.{rest}"
    return f"layers.{m}.block.{rest}"


def _tensor_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{index}: not a valid safetensors index ({exc})") from None
        return [folder / f for f in sorted(set(weight_map.values()))]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder}: no *.safetensors files (MTP modules are read from safetensors only)")
    return files


def read_mtp_tensors(folder: Path, start: int, count: int) -> dict[str, torch.Tensor]:
    """The first ``count`` modules' tensors under our names, read one by one (a target
    checkpoint's main weights are never loaded)."""
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    for file in _tensor_files(folder):
        try:
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for key in f.keys():
                    ours = mtp_param_name(key, start, count)
                    if ours is None or ours == SKIP:
                        continue
                    if ours in out:
                        raise CheckpointError(f"{folder}: MTP tensor {key!r} appears twice")
                    out[ours] = f.get_tensor(key)
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - any library error becomes one clear line
            raise CheckpointError(f"{file}: cannot read MTP tensors ({str(exc).splitlines()[0]})") from None
    return out


def read_config(folder: Path) -> dict[str, Any]:
    file = folder / "config.json"
    if not file.is_file():
        raise ModelNotFoundError(f"MTP checkpoint {folder} not found: expected a folder with config.json")
    try:
        raw = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{file} is not valid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{file} is not a JSON object")
    return raw


def mtp_head_config(raw: dict[str, Any], folder: Path, max_steps: int) -> tuple[MtpHeadConfig, MtpFamily]:
    """The head config of a checkpoint with K >= 1 modules, keeping ``min(K, max_steps)``."""
    k = num_mtp_modules(raw)
    if k < 1:
        raise CheckpointError(
            f"{folder} has no MTP modules (num_nextn_predict_layers is {raw.get('num_nextn_predict_layers')!r}); "
            "give an MTP head with --speculative-draft-model-path"
        )
    key = raw.get("model_type") or next((SUPPORTED_ARCHITECTURES[a] for a in raw.get("architectures") or []
                                         if a in SUPPORTED_ARCHITECTURES), None)
    family = mtp_family(str(key))
    if family is None:
        raise CheckpointError(f"{folder}: MTP modules of model_type {key!r} are not supported; supported: {', '.join(MTP_FAMILIES)}")
    try:
        cfg = family.parse(raw)
    except (UnsupportedArchitectureError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{folder}: invalid MTP config ({exc})") from None
    start = raw.get("num_hidden_layers")
    if not isinstance(start, int) or start < 0:
        raise CheckpointError(f"{folder}: num_hidden_layers={start!r} is invalid (module 0 is model.layers.<that>)")
    cycle = raw.get("mtp_cycle", True)
    if not isinstance(cycle, bool):
        raise CheckpointError(f"{folder}: mtp_cycle={cycle!r} is invalid: true or false")
    used = min(k, max_steps)
    return MtpHeadConfig(replace(cfg, num_layers=used), k, start, cycle), family


def load_mtp_head(path: str | Path, target: LlamaForCausalLM, dtype: torch.dtype, device: torch.device,
                  max_steps: int) -> MtpHead:
    """Load the MTP modules of ``path`` (a target checkpoint with its own modules, or a head
    folder in the same layout) that a chain of ``max_steps`` drafts uses, bound to ``target``
    (its embedding / LM head where the checkpoint has none)."""
    folder = Path(path)
    raw = read_config(folder)
    hc, family = mtp_head_config(raw, folder, max_steps)
    tcfg = target.config
    if hc.model.hidden_size != tcfg.hidden_size or hc.model.vocab_size != tcfg.vocab_size:
        raise CheckpointError(
            f"{folder}: MTP modules of hidden size {hc.model.hidden_size} / vocabulary {hc.model.vocab_size}, the "
            f"target has {tcfg.hidden_size} / {tcfg.vocab_size}"
        )
    sd = read_mtp_tensors(folder, hc.start_layer, hc.model.num_layers)
    head = MtpHead(hc, family.layer, family.rotary)
    head.shared._target.append(target)
    h, v = hc.model.hidden_size, hc.model.vocab_size
    if "shared.own_embed.weight" in sd:
        head.shared.own_embed = nn.Embedding(v, h)
    for m, module in enumerate(head.layers):
        if f"layers.{m}.shared_head.head.weight" in sd:
            module.shared_head.head = Linear(h, v, bias=False)
    head.to(dtype=dtype)
    family.load(head, sd, folder)
    head.to(device)
    head.rotary.build(device, dtype)  # type: ignore[operator]
    head.eval()
    return head

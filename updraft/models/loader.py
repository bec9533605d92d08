"""Load a checkpoint (Hugging Face folder or GGUF file) into a ``LlamaForCausalLM`` or, for
DeepSeek-V2/V3 folders, a ``DeepseekForCausalLM``.

The model is built on the meta device and materialised empty on the target device, then each
checkpoint tensor is read, converted to the target dtype/device and copied into place one at a
time, so peak host memory is one tensor, never a second copy of the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from updraft.errors import CheckpointError, ModelNotFoundError
from updraft.models.config import ModelConfig, UnsupportedArchitectureError
from updraft.models.deepseek import DeepseekV2ForCausalLM, DeepseekV3ForCausalLM
from updraft.models.gguf import GGUFCheckpoint, brief
from updraft.models.llama import DecoderLM, LlamaForCausalLM
from updraft.models.mtp_formats import mtp_param_name, num_mtp_modules
from updraft.progress import bar as progress_bar
from updraft.tokenizer import Tokenizer

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"


@dataclass
class LoadedModel:
    """A model ready for inference, with what it was loaded from."""

    model: DecoderLM
    config: ModelConfig
    tokenizer: Tokenizer
    source: Path
    hf_config: dict[str, Any]


def load_checkpoint(
    path: str | Path,
    *,
    dtype: torch.dtype,
    device: torch.device | str,
    max_positions: int | None = None,
    progress: bool = True,
) -> LoadedModel:
    """Load a Hugging Face folder (``config.json`` + ``model.safetensors`` or a sharded
    ``model.safetensors.index.json``) or a ``.gguf`` file. Weights are cast to ``dtype``
    (GGUF quantised weights are dequantised) on ``device``; ``max_positions`` sizes the RoPE
    table (default: the model's context length). Problems raise a one-line ``UpdraftError``."""
    source = Path(path).expanduser()
    if source.is_dir():
        return _load_hf_folder(source, dtype, device, max_positions, progress)
    if source.is_file() and source.suffix.lower() == ".gguf":
        return _load_gguf(source, dtype, device, max_positions, progress)
    if source.is_file():
        raise ModelNotFoundError(
            f"{source}: not a checkpoint; expected a Hugging Face folder or a .gguf file"
        )
    raise ModelNotFoundError(f"{source}: no such file or folder")


# ---- Hugging Face folders ------------------------------------------------------------------
def _load_hf_folder(
    folder: Path, dtype: torch.dtype, device: torch.device | str,
    max_positions: int | None, progress: bool,
) -> LoadedModel:
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise CheckpointError(f"{folder}: no config.json; not a Hugging Face model folder")
    try:
        hf_config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{config_file}: invalid JSON ({brief(e)})") from e
    if not isinstance(hf_config, dict):
        raise CheckpointError(f"{config_file}: expected a JSON object")
    cfg = _model_config(hf_config, config_file)
    files = safetensors_files(folder)
    tokenizer = Tokenizer.from_hf_folder(folder)
    tokenizer.add_eos_token_ids(cfg.eos_token_ids)
    model = _empty_model(cfg, dtype, device)
    cursor = _Cursor(folder)
    keep = getattr(model, "keeps_float32", None)
    # The checkpoint's own MTP modules (model.layers.{L..L+K-1}) are a draft's, not the target's:
    # never read here (updraft.models.mtp_formats reads them).
    mtp = num_mtp_modules(hf_config)
    weights = _safetensors_tensors(files, dtype, device, cursor, keep,
                                   skip=(lambda n: mtp_param_name(n, cfg.num_layers, mtp) is not None) if mtp else None)
    _fill(model, weights, _count_safetensors(files), cursor, progress)
    model.post_load(max_positions)
    model.eval()
    return LoadedModel(model=model, config=cfg, tokenizer=tokenizer, source=folder, hf_config=hf_config)


def safetensors_files(folder: Path) -> list[Path]:
    """The weight files of a folder, checked to exist."""
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{index}: not a valid safetensors index ({brief(e)})") from e
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CheckpointError(
                f"{index} names shard {missing[0]}, which is missing"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            )
        return [folder / n for n in names]
    single = folder / SAFETENSORS_FILE
    if single.is_file():
        return [single]
    # Unusual names (e.g. a single renamed shard): take every safetensors file there is.
    others = sorted(folder.glob("*.safetensors"))
    if others:
        return others
    raise CheckpointError(
        f"{folder}: no {SAFETENSORS_FILE} or {SAFETENSORS_INDEX} "
        "(only safetensors weights are supported)"
    )


def open_safetensors(file: Path) -> Any:
    from safetensors import safe_open

    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except Exception as e:  # SafetensorError, OSError, ...
        raise CheckpointError(f"{file}: corrupt or truncated safetensors file ({brief(e)})") from e


def _count_safetensors(files: list[Path]) -> int:
    total = 0
    for file in files:
        with open_safetensors(file) as f:
            total += len(list(f.keys()))
    return total


def _safetensors_tensors(
    files: list[Path], dtype: torch.dtype, device: torch.device | str, cursor: _Cursor,
    keeps_float32: Callable[[str], bool] | None = None,
    skip: Callable[[str], bool] | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of ``files``, floating ones cast to ``dtype`` (float32 where the model's
    ``keeps_float32(name)`` says so) on ``device``."""
    for file in files:
        cursor.file = file
        with open_safetensors(file) as f:
            for name in f.keys():
                if skip is not None and skip(name):
                    continue
                try:
                    t = f.get_tensor(name)
                except Exception as e:
                    raise CheckpointError(
                        f"{file}: cannot read tensor {name} ({brief(e)})"
                    ) from e
                if t.is_floating_point():
                    keep = keeps_float32 is not None and keeps_float32(name)
                    t = t.to(device=device, dtype=torch.float32 if keep else dtype)
                yield name, t
    # Past the last tensor, errors (tensors left out) concern the folder, not a file.
    cursor.file = files[0].parent


# ---- GGUF ----------------------------------------------------------------------------------
def _load_gguf(
    file: Path, dtype: torch.dtype, device: torch.device | str,
    max_positions: int | None, progress: bool,
) -> LoadedModel:
    ckpt = GGUFCheckpoint(file)
    hf_config = ckpt.hf_config()
    cfg = _model_config(hf_config, file)
    try:
        tokenizer = Tokenizer.from_gguf(ckpt.tokenizer_metadata())
    except CheckpointError as e:
        raise CheckpointError(f"{file}: {e}") from e
    tokenizer.add_eos_token_ids(cfg.eos_token_ids)
    model = _empty_model(cfg, dtype, device)
    _fill(model, ckpt.tensors(dtype, device), ckpt.num_weight_tensors, _Cursor(file), progress)
    model.post_load(max_positions)
    model.eval()
    return LoadedModel(model=model, config=cfg, tokenizer=tokenizer, source=file, hf_config=hf_config)


# ---- shared --------------------------------------------------------------------------------
@dataclass
class _Cursor:
    """Where loading is, for error messages: the file being read and the tensor just handed to
    the model (None once all were)."""

    file: Path
    tensor: str | None = None


def _model_config(hf_config: dict[str, Any], origin: Path) -> ModelConfig:
    try:
        return ModelConfig.from_hf(hf_config)
    except UnsupportedArchitectureError as e:
        raise CheckpointError(f"{origin}: {brief(e)}") from e
    except (KeyError, TypeError, ValueError) as e:
        what = f"missing key {e}" if isinstance(e, KeyError) else brief(e)
        raise CheckpointError(f"{origin}: invalid model config ({what})") from e


def model_class(cfg: ModelConfig) -> type[DecoderLM]:
    """The model class of a parsed config."""
    if cfg.deepseek is not None:
        return DeepseekV3ForCausalLM if cfg.architecture == "DeepseekV3ForCausalLM" else DeepseekV2ForCausalLM
    return LlamaForCausalLM


def _empty_model(cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str) -> DecoderLM:
    # Parameters are allocated once, on the target device, uninitialised: loading fills every one
    # (load_weights raises if any is left out).
    with torch.device("meta"):
        model = model_class(cfg)(cfg)
    model.to(dtype)
    return model.to_empty(device=device)


def _fill(
    model: DecoderLM,
    weights: Iterator[tuple[str, torch.Tensor]],
    total: int,
    cursor: _Cursor,
    progress: bool,
) -> None:
    bar = progress_bar(total, "Loading weights", enabled=progress, unit="tensor", leave=False)

    def counted() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            cursor.tensor = name
            yield name, tensor
            if bar is not None:
                bar.update(1)
        cursor.tensor = None

    try:
        with torch.no_grad():
            model.load_weights(counted())
    except CheckpointError:
        raise
    except (ValueError, AssertionError, AttributeError) as e:
        # Shape mismatches, tensors with no place in the model, missing tensors.
        reason = brief(e)
        if cursor.tensor is not None and cursor.tensor not in reason:
            reason = f"tensor {cursor.tensor}: {reason}"
        raise CheckpointError(f"{cursor.file}: {reason}") from e
    finally:
        if bar is not None:
            bar.close()

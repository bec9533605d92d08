"""Reading llama.cpp GGUF checkpoints: metadata -> Hugging Face config, tensors -> HF layout.

Conventions and hazards of the format that this module undoes:

* ggml lists a tensor's dimensions fastest-varying first (``ne0`` = columns), the reverse of
  numpy/torch; an HF ``[out, in]`` weight has ggml shape ``[in, out]``.
* For the ``llama`` architecture, llama.cpp's converter permutes the rows of the Q and K
  projections (weights and biases) within each head, from Hugging Face's rotate-half order
  (first half of the head's dims, then second half) to GPT-J's interleaved pairs order, because
  ggml's llama RoPE rotates adjacent pairs. ``qwen2``/``qwen3`` use ggml's neox RoPE and are not
  permuted. See :func:`unpermute_qk`.
* Llama 3.1-style RoPE scaling is not written as metadata; the converter stores a precomputed
  ``rope_freqs.weight`` table of per-frequency divisors instead. We recover the ``llama3`` scaling
  parameters from it (:func:`_llama3_scaling_from_factors`).
* Float metadata is stored as float32 (``1e-5`` reads back as ``9.999999747e-06``); we round it to
  the shortest decimal that round-trips through float32, which recovers the original HF value.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, quants

from updraft.errors import CheckpointError

# GGUF `general.architecture` -> (HF architectures entry, HF model_type). Mistral and SmolLM
# files are written as `llama`.
GGUF_ARCHITECTURES: dict[str, tuple[str, str]] = {
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
}

_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_TENSORS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")
# Tensors that carry no weights of their own: folded into the config instead.
_CONFIG_TENSORS = {"rope_freqs.weight"}


def hf_tensor_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor, or None if it has no HF counterpart."""
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    if m is None or m.group(2) not in _BLOCK_TENSORS:
        return None
    return f"model.layers.{m.group(1)}.{_BLOCK_TENSORS[m.group(2)]}.{m.group(3)}"


def unpermute_qk(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation (``llama`` architecture only).

    Within each head of ``d`` rows, GGUF row ``2*i + j`` holds HF row ``j*d/2 + i``. ``n_heads`` is
    the number of heads the rows belong to: attention heads for Q, KV heads for K. Works for
    weights ``[rows, in]`` and biases ``[rows]``.
    """
    rows = t.shape[0]
    half = rows // n_heads // 2
    if half * 2 * n_heads != rows:
        raise ValueError(f"cannot split {rows} rows into {n_heads} heads of even size")
    return t.reshape(n_heads, half, 2, *t.shape[1:]).transpose(1, 2).reshape(t.shape)


def _round_f32(x: float) -> float:
    # Shortest decimal that maps to the same float32: 9.999999747e-06 -> 1e-05.
    return float(str(np.float32(x)))


class GGUFCheckpoint:
    """A memory-mapped GGUF file: its metadata, an HF-style config, and its tensors in HF layout.

    Opening reads only the header; tensor data is read (and dequantised) lazily, one tensor at a
    time, by :meth:`tensors`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.reader = GGUFReader(self.path, "r")
        except Exception as e:  # the reader raises ValueError, struct/Index errors, ...
            raise CheckpointError(
                f"{self.path}: not a readable GGUF file ({brief(e)})"
            ) from e
        arch = self.get("general.architecture")
        if not isinstance(arch, str):
            raise CheckpointError(f"{self.path}: GGUF file has no general.architecture")
        self.arch: str = arch
        self._by_name = {t.name: t for t in self.reader.tensors}

    def get(self, key: str, default: Any = None) -> Any:
        """A metadata value (scalars as Python values, arrays as lists), or ``default``."""
        field = self.reader.fields.get(key)
        if field is None:
            return default
        try:
            return field.contents()
        except Exception as e:
            raise CheckpointError(f"{self.path}: unreadable metadata {key} ({brief(e)})") from e

    @property
    def tensor_names(self) -> list[str]:
        return list(self._by_name)

    @property
    def num_weight_tensors(self) -> int:
        """How many tensors :meth:`tensors` yields."""
        return sum(1 for n in self._by_name if n not in _CONFIG_TENSORS)

    # ---- config ------------------------------------------------------------------------------
    def hf_config(self) -> dict[str, Any]:
        """A Hugging Face ``config.json``-style dict describing the model in this file."""
        if self.arch not in GGUF_ARCHITECTURES:
            raise CheckpointError(
                f"{self.path}: unsupported GGUF architecture {self.arch!r}; "
                f"supported: {', '.join(GGUF_ARCHITECTURES)}"
            )
        hf_arch, model_type = GGUF_ARCHITECTURES[self.arch]

        def req(key: str) -> Any:
            value = self.get(f"{self.arch}.{key}")
            if value is None:
                raise CheckpointError(f"{self.path}: GGUF metadata lacks {self.arch}.{key}")
            return value

        heads = int(req("attention.head_count"))
        kv_heads = self.get(f"{self.arch}.attention.head_count_kv", heads)
        if isinstance(kv_heads, list):  # per-layer counts: only uniform ones are supported
            if len(set(kv_heads)) != 1:
                raise CheckpointError(f"{self.path}: per-layer KV head counts are not supported")
            kv_heads = kv_heads[0]
        embd = self._by_name.get("token_embd.weight")
        if embd is None:
            raise CheckpointError(f"{self.path}: GGUF file has no token_embd.weight tensor")
        cfg: dict[str, Any] = {
            "architectures": [hf_arch],
            "model_type": model_type,
            "hidden_size": int(req("embedding_length")),
            "intermediate_size": int(req("feed_forward_length")),
            "num_hidden_layers": int(req("block_count")),
            "num_attention_heads": heads,
            "num_key_value_heads": int(kv_heads),
            "rms_norm_eps": _round_f32(req("attention.layer_norm_rms_epsilon")),
            "rope_theta": _round_f32(self.get(f"{self.arch}.rope.freq_base", 10000.0)),
            "max_position_embeddings": int(self.get(f"{self.arch}.context_length", 2048)),
            # The embedding's row count is what the weights need; ggml shape is [hidden, vocab].
            "vocab_size": int(embd.shape[1]),
            "tie_word_embeddings": "output.weight" not in self._by_name,
        }
        key_length = self.get(f"{self.arch}.attention.key_length")
        if key_length is not None:
            cfg["head_dim"] = int(key_length)
        if self.arch == "qwen2":
            cfg["use_sliding_window"] = False
        for hf_key, gguf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
            value = self.get(f"tokenizer.ggml.{gguf_key}")
            if value is not None:
                cfg[hf_key] = int(value)
        scaling = self._rope_scaling(cfg)
        if scaling is not None:
            cfg["rope_scaling"] = scaling
        return cfg

    def _rope_scaling(self, cfg: dict[str, Any]) -> dict[str, Any] | None:
        if "rope_freqs.weight" in self._by_name:
            factors = self._array("rope_freqs.weight").astype(np.float64).reshape(-1)
            head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
            scaling = _llama3_scaling_from_factors(factors, head_dim, cfg["rope_theta"])
            if scaling is None:
                raise CheckpointError(
                    f"{self.path}: rope_freqs.weight does not match llama3 RoPE scaling; "
                    "other per-frequency scalings are not supported"
                )
            return scaling
        kind = self.get(f"{self.arch}.rope.scaling.type")
        if kind in (None, "none"):
            return None
        out: dict[str, Any] = {
            "rope_type": kind,
            "factor": _round_f32(self.get(f"{self.arch}.rope.scaling.factor", 1.0)),
        }
        orig = self.get(f"{self.arch}.rope.scaling.original_context_length")
        if orig is not None:
            out["original_max_position_embeddings"] = int(orig)
        return out

    # ---- tokenizer ---------------------------------------------------------------------------
    def tokenizer_metadata(self) -> dict[str, Any]:
        """Every ``tokenizer.ggml.*`` key with the prefix stripped (``model``, ``pre``, ``tokens``,
        ``token_type``, ``merges``, ``scores``, ``bos_token_id``, ``eos_token_id``,
        ``unknown_token_id``, ``padding_token_id``, ``add_bos_token``, ...) plus
        ``chat_template`` -- the input of ``Tokenizer.from_gguf``."""
        meta: dict[str, Any] = {}
        for key in self.reader.fields:
            if key.startswith("tokenizer.ggml."):
                meta[key.removeprefix("tokenizer.ggml.")] = self.get(key)
        template = self.get("tokenizer.chat_template")
        if template is not None:
            meta["chat_template"] = template
        return meta

    # ---- tensors -----------------------------------------------------------------------------
    def _array(self, name: str) -> np.ndarray:
        """One tensor as a numpy array in HF shape: float32 if quantised, else its own float
        type (a read-only view of the memory map where possible)."""
        t = self._by_name[name]
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        try:
            if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                return t.data.reshape(shape)
            if t.tensor_type == GGMLQuantizationType.BF16:
                return t.data.view(np.int16).reshape(shape)  # reinterpreted as bf16 by the caller
            return quants.dequantize(t.data, t.tensor_type).reshape(shape)
        except NotImplementedError as e:
            raise CheckpointError(
                f"{self.path}: tensor {name} has quantisation type {t.tensor_type.name}, "
                "which gguf cannot dequantise"
            ) from e
        except ValueError as e:  # reshape of a truncated memory map
            raise CheckpointError(f"{self.path}: tensor {name} is truncated ({brief(e)})") from e

    def tensors(
        self, dtype: torch.dtype | None = None, device: torch.device | str = "cpu"
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(hf_name, tensor)`` one at a time, in HF layout, converted to ``dtype``
        (default: float32) on ``device``. Each tensor is a fresh copy, never a view of the file."""
        dtype = dtype or torch.float32
        if self.arch not in GGUF_ARCHITECTURES:
            self.hf_config()  # raises the unsupported-architecture error
        heads = int(self.get(f"{self.arch}.attention.head_count", 0))
        kv_heads = self.get(f"{self.arch}.attention.head_count_kv", heads)
        kv_heads = int(kv_heads[0] if isinstance(kv_heads, list) else kv_heads)
        for name, t in self._by_name.items():
            if name in _CONFIG_TENSORS:
                continue
            hf_name = hf_tensor_name(name)
            if hf_name is None:
                raise CheckpointError(f"{self.path}: unexpected tensor {name} for {self.arch}")
            arr = self._array(name)
            # Unquantised tensors are read-only views of the memory map: copy them (never hand
            # out a view a caller could write through). Dequantised ones are fresh arrays already.
            from_map = not arr.flags.writeable
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*not writable.*")
                src = torch.from_numpy(arr)
            if t.tensor_type == GGMLQuantizationType.BF16:
                src = src.view(torch.bfloat16)
            out = src.to(device=device, dtype=dtype, copy=from_map)
            if self.arch == "llama" and ".attn_q." in name:
                out = unpermute_qk(out, heads)
            elif self.arch == "llama" and ".attn_k." in name:
                out = unpermute_qk(out, kv_heads)
            yield hf_name, out


def _llama3_scaling_from_factors(
    factors: np.ndarray, head_dim: int, theta: float
) -> dict[str, Any] | None:
    """Recover Llama 3.1 RoPE scaling parameters from llama.cpp's ``rope_freqs`` table.

    llama.cpp stores, per frequency, the divisor applied to it: 1 for high frequencies,
    ``factor`` for low ones, and a smooth blend between. The table alone does not pin down
    ``low_freq_factor``/``high_freq_factor``/``original_max_position_embeddings``, so we try the
    values every released Llama 3.x model uses and accept them only if they reproduce the table.
    """
    if factors.size != head_dim // 2 or not np.all(np.isfinite(factors)):
        return None
    factor = float(factors.max())
    if math.isclose(factor, 1.0):
        return None
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    wavelen = 2 * math.pi / inv_freq
    for orig in (8192, 4096, 16384, 32768, 2048):
        low, high = 1.0, 4.0
        low_wavelen, high_wavelen = orig / low, orig / high
        smooth = (orig / wavelen - low) / (high - low)
        expected = np.where(
            wavelen < high_wavelen,
            1.0,
            np.where(wavelen > low_wavelen, factor, 1.0 / ((1 - smooth) / factor + smooth)),
        )
        if np.allclose(expected, factors, rtol=1e-3):
            return {
                "rope_type": "llama3",
                "factor": _round_f32(factor),
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": orig,
            }
    return None


def brief(e: BaseException) -> str:
    """A one-line, bounded description of an exception."""
    text = str(e).strip().splitlines()
    msg = text[0] if text else type(e).__name__
    return msg if len(msg) <= 160 else msg[:157] + "..."

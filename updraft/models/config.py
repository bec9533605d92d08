"""Architecture description of a Llama-family checkpoint, parsed from a Hugging Face config."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from updraft.models.deepseek_config import DeepseekShape

# Hugging Face `architectures` entries we implement, mapped to our family name.
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
MODEL_TYPES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}


# Architectures with their own parser (``deepseek_config.py``): MLA attention and MoE MLPs.
DEEPSEEK_ARCHITECTURES = {"DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3"}


class UnsupportedArchitectureError(ValueError):
    pass


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling. ``kind``: default, linear, llama3 or yarn (DeepSeek only: the
    Llama family's parser does not accept it). The yarn fields follow the published configs:
    ``beta_fast`` / ``beta_slow`` bound the ramp between extrapolated and interpolated
    frequencies; ``mscale`` / ``mscale_all_dim`` set the cos/sin magnitude
    (``attention_factor`` when given overrides it); ``truncate`` rounds the ramp's ends."""

    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True

    def cos_sin_factor(self) -> float:
        """What yarn multiplies cos and sin by (1 for every other kind)."""
        if self.kind != "yarn":
            return 1.0
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(self.factor, self.mscale) / yarn_mscale(self.factor, self.mscale_all_dim)
        return yarn_mscale(self.factor)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(scale) + 1`` (1 for ``scale <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class ModelConfig:
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    sliding_window: int | None = None
    architecture: str = "LlamaForCausalLM"
    # Attention layout beyond Llama's (MLA): V's width when it differs from head_dim, V read
    # from K's leading columns (one latent cache row per token), and a softmax scale other
    # than head_dim ** -0.5. See ``KVPool``.
    v_head_dim: int | None = None
    shared_kv: bool = False
    attn_scale: float | None = None
    #: DeepSeek-V2/V3's MLA and MoE shape (None for the Llama family).
    deepseek: DeepseekShape | None = None

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """KV cache bytes one token takes over every layer."""
        from updraft.memory.pools import KVPool

        return KVPool.bytes_per_token(
            self.num_layers, self.num_kv_heads, self.head_dim, dtype, v_head_dim=self.v_head_dim, shared_kv=self.shared_kv
        )

    @property
    def context_len(self) -> int:
        """Longest sequence we serve exactly. A sliding window (Mistral v0.1) caps it, so full
        attention over the window is exact."""
        if self.sliding_window:
            return min(self.max_position_embeddings, int(self.sliding_window))
        return self.max_position_embeddings

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ModelConfig:
        """Parse a Hugging Face ``config.json`` dict; unsupported architectures raise."""
        archs = cfg.get("architectures") or []
        model_type = cfg.get("model_type", "")
        if any(a in DEEPSEEK_ARCHITECTURES for a in archs) or (not archs and model_type in DEEPSEEK_ARCHITECTURES.values()):
            from updraft.models.deepseek_config import deepseek_model_config

            return deepseek_model_config(cfg)
        family = None
        arch = None
        for a in archs:
            if a in SUPPORTED_ARCHITECTURES:
                family, arch = SUPPORTED_ARCHITECTURES[a], a
                break
        if family is None and model_type in MODEL_TYPES and not archs:
            family = MODEL_TYPES[model_type]
            arch = next(k for k, v in SUPPORTED_ARCHITECTURES.items() if v == family)
        if family is None:
            shown = ", ".join(archs) or model_type or "<none>"
            raise UnsupportedArchitectureError(
                f"unsupported architecture {shown}; supported: {', '.join([*SUPPORTED_ARCHITECTURES, *DEEPSEEK_ARCHITECTURES])}"
            )
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
        # Qwen2 always has q/k/v biases; Llama exposes them as attention_bias.
        qkv_bias = bool(cfg.get("attention_bias", False)) or family == "qwen2"
        sliding = cfg.get("sliding_window")
        if family == "qwen2" and not cfg.get("use_sliding_window", False):
            sliding = None
        if family == "qwen3" and not cfg.get("use_sliding_window", False):
            sliding = None
        return cls(
            family=family,
            architecture=arch or "",
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta_of(cfg),
            rope_scaling=_rope_scaling(cfg),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            qk_norm=family == "qwen3",
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=tuple(int(e) for e in eos_ids),
            sliding_window=int(sliding) if sliding else None,
        )


def rope_params(cfg: dict[str, Any]) -> dict[str, Any]:
    # transformers >= 5 writes `rope_parameters`; older configs use `rope_scaling` + `rope_theta`.
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        return params
    scaling = cfg.get("rope_scaling")
    return scaling if isinstance(scaling, dict) else {}


def rope_theta_of(cfg: dict[str, Any]) -> float:
    params = rope_params(cfg)
    return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def _rope_scaling(cfg: dict[str, Any]) -> RopeScaling:
    params = rope_params(cfg)
    kind = params.get("rope_type", params.get("type", "default")) or "default"
    if kind == "default":
        return RopeScaling()
    if kind == "linear":
        return RopeScaling(kind="linear", factor=float(params["factor"]))
    if kind == "llama3":
        return RopeScaling(
            kind="llama3",
            factor=float(params["factor"]),
            low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            original_max_position_embeddings=int(params.get("original_max_position_embeddings", 8192)),
        )
    raise UnsupportedArchitectureError(
        f"unsupported rope scaling type {kind!r}; supported: default, linear, llama3"
    )

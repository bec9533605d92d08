"""DeepSeek-V2/V3's shape beyond ``ModelConfig``: MLA attention, the MoE MLP and its routing,
multi-token-prediction layers; parsed from a Hugging Face ``config.json``.

The ``ModelConfig`` these checkpoints get describes the KV cache the engine allocates: one
latent row per token (``num_kv_heads=1``, ``head_dim = kv_lora_rank + qk_rope_head_dim``),
V = its first ``kv_lora_rank`` columns (``v_head_dim``, ``shared_kv``), and the softmax scale of
the un-absorbed heads (``(qk_nope + qk_rope) ** -0.5``, times YaRN's ``mscale_all_dim``
correction squared when the config asks for it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from updraft.models.config import (
    DEEPSEEK_ARCHITECTURES,
    ModelConfig,
    RopeScaling,
    rope_params,
    rope_theta_of,
    yarn_mscale,
)

TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")
SCORING_FUNCS = ("softmax", "sigmoid")
ROPE_KINDS = ("default", "yarn")


@dataclass(frozen=True)
class MLAShape:
    """Multi-head latent attention. ``q_lora_rank`` None: queries from one ``q_proj``
    (V2-Lite), else ``q_a_proj -> q_a_layernorm -> q_b_proj``. ``rope_interleave``: the
    checkpoint's rope dims rotate as adjacent pairs (V2 always; V3 unless the config says
    ``rope_interleave: false``)."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    rope_interleave: bool = True
    attention_bias: bool = False

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cache_dim(self) -> int:
        """Width of one cache row: the latent, then the rotated shared key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class MoEShape:
    """Routed experts (+ one shared gated MLP of ``moe_intermediate_size * n_shared_experts``).

    Selection: ``scoring_func`` (softmax or sigmoid) over the router logits; ``topk_method``
    greedy (top-k of all), group_limited_greedy (the ``topk_group`` groups with the highest
    single score) or noaux_tc (score + ``e_score_correction_bias``, groups ranked by the sum of
    their top two, the bias used for selection only). Weights: the chosen un-biased scores,
    normalised to sum 1 when ``norm_topk_prob``; then times ``routed_scaling_factor`` -- on V2
    only when not normalised (``scale_normed`` False, as DeepSeek-V2's own code does; transformers'
    V2 ignores ``norm_topk_prob`` and always scales: the published V2 configs set it false, where
    the two agree), on V3 always."""

    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    n_shared_experts: int = 0
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = False
    scoring_func: str = "softmax"
    topk_method: str = "greedy"
    n_group: int = 1
    topk_group: int = 1
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    scale_normed: bool = True

    @property
    def has_bias(self) -> bool:
        return self.topk_method == "noaux_tc"

    def is_moe_layer(self, layer_id: int) -> bool:
        return layer_id >= self.first_k_dense_replace and layer_id % self.moe_layer_freq == 0


@dataclass(frozen=True)
class DeepseekShape:
    """``layer_offset``: the checkpoint index of layer 0 of a model built from this shape (0 for
    the target; L for an MTP drafter whose layer j is checkpoint layer L + j), so dense/MoE
    placement follows the checkpoint while KV-cache layer ids start at 0."""

    mla: MLAShape
    moe: MoEShape | None  # None: every layer is a dense MLP
    num_nextn_predict_layers: int = 0
    layer_offset: int = 0

    def is_moe_layer(self, layer_id: int) -> bool:
        return self.moe is not None and self.moe.is_moe_layer(layer_id + self.layer_offset)


def _bad(name: str, value: object, allowed: str) -> ValueError:
    return ValueError(f"{name}={value!r} is not supported; allowed: {allowed}")


def _int(cfg: dict[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise KeyError(key)
    return int(value)


def _moe_shape(cfg: dict[str, Any], v3: bool) -> MoEShape | None:
    experts = cfg.get("n_routed_experts")
    if not experts:
        return None
    topk_method = cfg.get("topk_method") or ("noaux_tc" if v3 else "greedy")
    scoring = cfg.get("scoring_func") or ("sigmoid" if v3 else "softmax")
    if topk_method not in TOPK_METHODS:
        raise _bad("topk_method", topk_method, ", ".join(TOPK_METHODS))
    if scoring not in SCORING_FUNCS:
        raise _bad("scoring_func", scoring, ", ".join(SCORING_FUNCS))
    grouped = topk_method != "greedy"
    n_group = int(cfg.get("n_group") or 1) if grouped else 1
    topk_group = int(cfg.get("topk_group") or 1) if grouped else 1
    k = _int(cfg, "num_experts_per_tok")
    shape = MoEShape(
        n_routed_experts=int(experts), num_experts_per_tok=k, moe_intermediate_size=_int(cfg, "moe_intermediate_size"),
        n_shared_experts=int(cfg.get("n_shared_experts") or 0), routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.0)),
        norm_topk_prob=bool(cfg.get("norm_topk_prob", v3)), scoring_func=scoring, topk_method=topk_method,
        n_group=n_group, topk_group=topk_group, first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
        moe_layer_freq=int(cfg.get("moe_layer_freq") or 1), scale_normed=v3,
    )
    _check_moe(shape)
    return shape


def _check_moe(m: MoEShape) -> None:
    if m.n_group < 1 or m.n_routed_experts % m.n_group:
        raise ValueError(f"n_group={m.n_group} must divide n_routed_experts={m.n_routed_experts}")
    if not 1 <= m.topk_group <= m.n_group:
        raise ValueError(f"topk_group={m.topk_group} must be in 1..n_group={m.n_group}")
    candidates = m.topk_group * (m.n_routed_experts // m.n_group)
    if not 1 <= m.num_experts_per_tok <= candidates:
        raise ValueError(
            f"num_experts_per_tok={m.num_experts_per_tok} must be in 1..{candidates} "
            f"(the experts of topk_group={m.topk_group} of n_group={m.n_group} groups)"
        )
    if m.topk_method == "noaux_tc" and m.n_routed_experts // m.n_group < 2:
        raise ValueError(f"topk_method='noaux_tc' ranks groups by their top two experts; n_group={m.n_group} leaves fewer per group")
    if m.moe_layer_freq < 1:
        raise ValueError(f"moe_layer_freq={m.moe_layer_freq} must be >= 1")


def _rope(cfg: dict[str, Any]) -> RopeScaling:
    params = rope_params(cfg)
    kind = params.get("rope_type", params.get("type", "default")) or "default"
    if kind not in ROPE_KINDS:
        raise _bad("rope type", kind, ", ".join(ROPE_KINDS))
    if kind == "default":
        return RopeScaling()
    original = int(params.get("original_max_position_embeddings") or cfg.get("max_position_embeddings", 4096))
    factor = params.get("factor")
    factor = float(factor) if factor is not None else float(cfg["max_position_embeddings"]) / original
    opt = {k: float(params[k]) for k in ("mscale", "mscale_all_dim", "attention_factor") if params.get(k) is not None}
    return RopeScaling(
        kind="yarn", factor=factor, original_max_position_embeddings=original,
        beta_fast=float(params.get("beta_fast") or 32), beta_slow=float(params.get("beta_slow") or 1),
        truncate=bool(params.get("truncate", True)), **opt,
    )


def mla_softmax_scale(mla: MLAShape, rope: RopeScaling) -> float:
    """The un-absorbed heads' scale ``qk_head_dim ** -0.5``; YaRN's ``mscale_all_dim`` squared on top."""
    scale = mla.qk_head_dim**-0.5
    if rope.kind != "default" and rope.mscale_all_dim:
        scale *= yarn_mscale(rope.factor, rope.mscale_all_dim) ** 2
    return scale


def deepseek_model_config(cfg: dict[str, Any]) -> ModelConfig:
    """``ModelConfig`` (with ``deepseek`` set) of a DeepSeek-V2/V3 ``config.json``. Values we do
    not implement raise ``ValueError`` naming the value and what is allowed."""
    archs = cfg.get("architectures") or []
    arch = next((a for a in archs if a in DEEPSEEK_ARCHITECTURES), None)
    if arch is None:
        arch = next(a for a, t in DEEPSEEK_ARCHITECTURES.items() if t == cfg.get("model_type"))
    v3 = arch == "DeepseekV3ForCausalLM"
    if cfg.get("quantization_config"):
        method = cfg["quantization_config"].get("quant_method", "?") if isinstance(cfg["quantization_config"], dict) else "?"
        raise _bad("quantization_config.quant_method", method, "none (convert the checkpoint to bf16 first)")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise _bad("hidden_act", act, "silu")
    if cfg.get("mlp_bias"):
        raise _bad("mlp_bias", True, "false")
    q_lora = cfg.get("q_lora_rank")
    mla = MLAShape(
        kv_lora_rank=_int(cfg, "kv_lora_rank"), qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"), v_head_dim=_int(cfg, "v_head_dim"),
        q_lora_rank=int(q_lora) if q_lora else None,
        rope_interleave=bool(cfg.get("rope_interleave", True)) if v3 else True,
        attention_bias=bool(cfg.get("attention_bias", False)),
    )
    if mla.qk_rope_head_dim % 2 or mla.qk_rope_head_dim < 2:
        raise ValueError(f"qk_rope_head_dim={mla.qk_rope_head_dim} must be even and >= 2")
    mtp = cfg.get("num_nextn_predict_layers", cfg.get("num_mtp_layers", 0)) or 0
    shape = DeepseekShape(mla=mla, moe=_moe_shape(cfg, v3), num_nextn_predict_layers=int(mtp))
    rope = _rope(cfg)
    eos = cfg.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
    return ModelConfig(
        family=DEEPSEEK_ARCHITECTURES[arch],
        architecture=arch,
        vocab_size=_int(cfg, "vocab_size"),
        hidden_size=_int(cfg, "hidden_size"),
        intermediate_size=_int(cfg, "intermediate_size"),
        num_layers=_int(cfg, "num_hidden_layers"),
        num_heads=_int(cfg, "num_attention_heads"),
        num_kv_heads=1,
        head_dim=mla.cache_dim,
        v_head_dim=mla.kv_lora_rank,
        shared_kv=True,
        attn_scale=mla_softmax_scale(mla, rope),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta_of(cfg),
        rope_scaling=rope,
        max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=tuple(int(e) for e in eos_ids),
        deepseek=shape,
    )


def mtp_model_config(cfg: ModelConfig) -> ModelConfig:
    """The config of a drafter made of ``cfg``'s MTP layers: ``num_layers`` = the MTP layers,
    layer j being checkpoint layer ``num_layers + j`` (``layer_offset``), so its KV pool has one
    layer per MTP layer and ``DeepseekDecoderLayer(mtp_cfg, j)`` is dense or MoE as the
    checkpoint's layer is."""
    if cfg.deepseek is None or cfg.deepseek.num_nextn_predict_layers < 1:
        raise ValueError(f"{cfg.architecture} config has no MTP layers (num_nextn_predict_layers=0)")
    shape = dataclasses.replace(cfg.deepseek, num_nextn_predict_layers=0, layer_offset=cfg.deepseek.layer_offset + cfg.num_layers)
    return dataclasses.replace(cfg, num_layers=cfg.deepseek.num_nextn_predict_layers, deepseek=shape)

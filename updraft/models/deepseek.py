"""DeepSeek-V2 and V3 (``DeepseekV2ForCausalLM``, ``DeepseekV3ForCausalLM``): MLA attention over
a latent KV cache, dense and mixture-of-experts MLPs (``deepseek_moe.py``), one implementation.

MLA, absorbed in every mode. Per token ``kv_a_proj_with_mqa`` gives the latent ``c``
(``kv_lora_rank``, normed by ``kv_a_layernorm``) and one shared rope key ``k_pe``; the cache
row is ``[c | rot(k_pe)]`` (``kv_lora_rank + qk_rope_head_dim`` wide, one per token: the
``ModelConfig`` says ``num_kv_heads=1``, ``v_head_dim=kv_lora_rank``, ``shared_kv``).
``kv_b_proj`` holds per head W_UK [qk_nope, kv_lora] and W_UV [v_head, kv_lora]; since
``q_nope . (W_UK c) = (W_UK^T q_nope) . c`` and ``sum_j p_j W_UV c_j = W_UV sum_j p_j c_j``,
the query becomes ``[W_UK^T q_nope | rot(q_pe)]`` per head, attention runs over the cache rows
as keys and their first ``kv_lora_rank`` columns as values (MQA-like), and W_UV maps each
head's output back before ``o_proj``. The softmax scale is the un-absorbed one.

RoPE. The checkpoints rotate adjacent pairs ``(x0, x1), (x2, x3), ...`` of the rope dims (V2;
V3 unless ``rope_interleave`` is false). Loading permutes those rows of the query projection
and of ``kv_a_proj_with_mqa`` to evens-then-odds, after which the neox rotation
(``ops.rotary_``) computes the same pairs; q_pe . k_pe is unchanged because both sides move
alike. YaRN frequencies and magnitude live in the shared rotary code (``layers.py``).

Checkpoint names (Hugging Face, as published), per layer ``model.layers.N.``:
``input_layernorm``, ``post_attention_layernorm``; ``self_attn.`` ``q_proj`` (no q_lora) or
``q_a_proj``, ``q_a_layernorm``, ``q_b_proj``; ``kv_a_proj_with_mqa``, ``kv_a_layernorm``,
``kv_b_proj``, ``o_proj``; dense ``mlp.{gate,up,down}_proj``; MoE ``mlp.gate.weight``,
``mlp.gate.e_score_correction_bias`` (noaux_tc), ``mlp.experts.E.{gate,up,down}_proj.weight``,
``mlp.shared_experts.{gate,up,down}_proj.weight``. Top level: ``model.embed_tokens``,
``model.norm``, ``lm_head``.

Multi-token prediction (``num_nextn_predict_layers`` = n): layers ``model.layers.{L+i}.*``
(L = ``num_hidden_layers``, i < n) carry a full decoder layer's names plus ``enorm``, ``hnorm``,
``eh_proj``, ``shared_head.norm``, ``shared_head.head`` and ``embed_tokens``. The target
ignores them; ``deepseek_mtp.load_mtp_state`` hands them to an MTP drafter, which builds
``DeepseekDecoderLayer(mtp_model_config(cfg), i)`` and fills it with ``load_layer_weights``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from updraft import ops
from updraft.batch import ForwardBatch
from updraft.models.config import ModelConfig
from updraft.models.deepseek_config import DeepseekShape
from updraft.models.deepseek_moe import DeepseekMoE, StackedExperts
from updraft.models.layers import GatedMLP, Linear, MergedLinear, RMSNorm, RotaryEmbedding
from updraft.models.llama import DecoderLM

# The reference implementations build q_a_layernorm / kv_a_layernorm with their default eps,
# not the config's rms_norm_eps.
LATENT_NORM_EPS = 1e-6


def _shape(cfg: ModelConfig) -> DeepseekShape:
    if cfg.deepseek is None:
        raise ValueError(f"{cfg.architecture} is not a DeepSeek model config (ModelConfig.deepseek is None)")
    return cfg.deepseek


def evens_then_odds(t: torch.Tensor, period: int, start: int, width: int) -> torch.Tensor:
    """Rows ``[start, start + width)`` of every ``period``-row block of ``t`` reordered as their
    even rows, then their odd rows (interleaved rope pairs -> neox halves)."""
    idx = torch.arange(period)
    idx[start : start + width] = start + torch.cat([torch.arange(0, width, 2), torch.arange(1, width, 2)])
    blocks = t.reshape(-1, period, *t.shape[1:])
    return blocks[:, idx.to(t.device)].reshape(t.shape)


class MLAttention(nn.Module):
    """MLA in the absorbed form (module docstring); the layer rotates q_pe and k_pe itself, so
    the backend gets ``rope=None``."""

    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__()
        mla = _shape(cfg).mla
        self.mla = mla
        self.layer_id = layer_id
        self.num_heads = h = cfg.num_heads
        hidden, bias = cfg.hidden_size, mla.attention_bias
        if mla.q_lora_rank is None:
            self.q_proj: nn.Linear | None = Linear(hidden, h * mla.qk_head_dim, bias=False)
        else:
            self.q_proj = None
            self.q_a_proj = Linear(hidden, mla.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = Linear(mla.q_lora_rank, h * mla.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = Linear(hidden, mla.cache_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(mla.kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = Linear(mla.kv_lora_rank, h * (mla.qk_nope_head_dim + mla.v_head_dim), bias=False)
        self.o_proj = Linear(h * mla.v_head_dim, hidden, bias=bias)
        # Absorbed weights, kv_b_proj's per-head blocks copied into bmm layouts by ``absorb``
        # after loading (again if kv_b_proj is reloaded): w_kc [H, qk_nope, kv_lora] maps q_nope
        # into the latent space, w_vc [H, kv_lora, v_head] maps a latent output to the head's V.
        self.register_buffer("w_kc", torch.empty(0), persistent=False)
        self.register_buffer("w_vc", torch.empty(0), persistent=False)

    def absorb(self) -> None:
        """Split ``kv_b_proj`` into the per-head absorbed weights (contiguous copies in the model
        dtype). Rounding: the un-absorbed form rounds ``k_nope = W_UK c`` (and ``v = W_UV c``)
        to the dtype per head and token; this one rounds ``W_UK^T q_nope`` and the latent
        attention output instead. Same sums in another order: fp32 agrees to ~1e-6, bf16 differs
        from an un-absorbed implementation (e.g. transformers) by one rounding of similar size,
        not bitwise."""
        m = self.mla
        w = self.kv_b_proj.weight.detach().view(self.num_heads, m.qk_nope_head_dim + m.v_head_dim, m.kv_lora_rank)
        self.w_kc = w[:, : m.qk_nope_head_dim].contiguous()
        self.w_vc = w[:, m.qk_nope_head_dim :].transpose(1, 2).contiguous()

    def _latent_pool(self, batch: ForwardBatch, dtype: torch.dtype) -> torch.Tensor | None:
        """This layer's latent pool when the latent kernel may store the new rows itself (the
        backend then reads them with ``forward_stored``), else None."""
        backend = batch.attn_backend
        if backend is None or not backend.stored_kv or batch.out_cache_loc is None:
            return None
        pool = backend.kv_pool
        if not pool.shared_kv or pool.dtype != dtype:
            return None
        return pool.k_buffer[self.layer_id]

    def forward(self, x: torch.Tensor, batch: ForwardBatch, rotary: RotaryEmbedding) -> torch.Tensor:
        m, t, h = self.mla, x.shape[0], self.num_heads
        if self.q_proj is not None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(t, h, m.qk_head_dim)
        q_nope, q_pe = q[..., : m.qk_nope_head_dim], q[..., m.qk_nope_head_dim :]
        kv = self.kv_a_proj_with_mqa(x)
        backend = batch.attn_backend
        assert backend is not None, "ForwardBatch.attn_backend must be set"
        pool = self._latent_pool(batch, kv.dtype)
        norm = self.kv_a_layernorm
        stored = False
        if ops.latent_rows_(kv, q_pe, batch.positions, rotary.cos_sin, norm.weight, norm.eps, m.kv_lora_rank, pool,
                            batch.out_cache_loc):  # one launch: norm, both rotations, the pool's rows
            k_row, stored = kv[:, None], pool is not None
        else:
            latent, k_pe = kv[:, : m.kv_lora_rank], kv[:, None, m.kv_lora_rank :]
            rotary.apply_(batch.positions, q_pe, k_pe)  # in place, on views of q and kv
            k_row = torch.cat([norm(latent), k_pe[:, 0]], dim=-1)[:, None]  # [T, 1, cache_dim]
        q_lat = torch.bmm(q_nope.transpose(0, 1), self.w_kc).transpose(0, 1)  # [T, H, kv_lora]
        q_full = torch.cat([q_lat, q_pe], dim=-1)
        v = k_row[..., : m.kv_lora_rank]
        if stored:
            out = backend.forward_stored(q_full, k_row, v, self.layer_id, batch)
        else:
            out = backend.forward(q_full, k_row, v, self.layer_id, batch, rope=None)
        o = torch.bmm(out.transpose(0, 1), self.w_vc)  # [H, T, v_head]
        return self.o_proj(o.transpose(0, 1).reshape(t, h * m.v_head_dim))


class DeepseekDecoderLayer(nn.Module):
    """One decoder layer; ``forward(x, residual, batch, rotary) -> (x, residual)`` as
    ``LlamaDecoderLayer``'s (the layer's output is the sum, left for the next norm)."""

    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__()
        shape = _shape(cfg)
        self.layer_id = layer_id
        self.self_attn = MLAttention(cfg, layer_id)
        self.mlp: DeepseekMoE | GatedMLP
        if shape.moe is not None and shape.is_moe_layer(layer_id):
            self.mlp = DeepseekMoE(cfg.hidden_size, shape.moe)
        else:
            self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None, batch: ForwardBatch, rotary: RotaryEmbedding
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm.forward_add(x, residual)
        x = self.self_attn(x, batch, rotary)
        x, residual = self.post_attention_layernorm.forward_add(x, residual)
        return self.mlp(x), residual

    # ---- weights ---------------------------------------------------------------------------
    def weight_slots(self) -> set[str]:
        """Every slot loading must fill once: plain parameters by name, fused ones per shard
        (``name#shard``), stacked experts per expert (``w13[e]#shard``, ``w2[e]``)."""
        slots: set[str] = set()
        for name, module in self.named_modules():
            prefix = f"{name}." if name else ""
            if isinstance(module, MergedLinear):
                slots |= {f"{prefix}weight#{s}" for s in range(len(module.shard_sizes))}
            elif isinstance(module, StackedExperts):
                for e in range(module.num_experts):
                    slots |= {f"{prefix}w13[{e}]#0", f"{prefix}w13[{e}]#1", f"{prefix}w2[{e}]"}
            else:
                slots |= {prefix + n for n, p in module.named_parameters(recurse=False) if p is not None}
        return slots

    def load_weight(self, name: str, tensor: torch.Tensor) -> str:
        """Copy one checkpoint tensor (``name`` relative to the layer, e.g.
        ``self_attn.kv_b_proj.weight``) into place; returns the slot it filled."""
        parts = name.split(".")
        mla = self.self_attn.mla
        if parts[:2] == ["mlp", "experts"] and len(parts) == 5 and isinstance(self.mlp, DeepseekMoE):
            return self._load_expert(parts[2], parts[3], parts[4], tensor)
        if len(parts) >= 2 and parts[-2] in ("gate_proj", "up_proj") and parts[-1] == "weight":  # dense / shared MLP
            module_name = ".".join(parts[:-2] + ["gate_up_proj"])
            module = self._submodule(module_name, name)
            if not isinstance(module, MergedLinear):
                raise ValueError(f"checkpoint tensor {name!r} has no place in a DeepSeek layer")
            shard = 0 if parts[-2] == "gate_proj" else 1
            module.load_shard(shard, "weight", tensor)
            return f"{module_name}.weight#{shard}"
        params = dict(self.named_parameters())
        if name not in params or name.startswith("mlp.experts."):
            raise ValueError(f"checkpoint tensor {name!r} has no place in DeepSeek layer {self.layer_id}")
        _check_shape(params[name], tensor, name)
        if mla.rope_interleave:
            if name in ("self_attn.q_proj.weight", "self_attn.q_b_proj.weight"):
                tensor = evens_then_odds(tensor, mla.qk_head_dim, mla.qk_nope_head_dim, mla.qk_rope_head_dim)
            elif name in ("self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_proj_with_mqa.bias"):
                tensor = evens_then_odds(tensor, mla.cache_dim, mla.kv_lora_rank, mla.qk_rope_head_dim)
        _copy(params[name], tensor, name)
        return name

    def _submodule(self, module_name: str, name: str) -> nn.Module:
        try:
            return self.get_submodule(module_name)
        except AttributeError as e:
            raise ValueError(f"checkpoint tensor {name!r} has no place in DeepSeek layer {self.layer_id}") from e

    def _load_expert(self, index: str, proj: str, kind: str, tensor: torch.Tensor) -> str:
        assert isinstance(self.mlp, DeepseekMoE)
        experts = self.mlp.experts
        name = f"mlp.experts.{index}.{proj}.{kind}"
        if not index.isdigit() or int(index) >= experts.num_experts or kind != "weight" or proj not in ("gate_proj", "up_proj", "down_proj"):
            raise ValueError(f"checkpoint tensor {name!r} has no place in DeepSeek layer {self.layer_id} "
                             f"({experts.num_experts} experts, each gate_proj/up_proj/down_proj weights)")
        e, i = int(index), experts.intermediate
        if proj == "down_proj":
            _copy(experts.w2[e], tensor, name)
            return f"mlp.experts.w2[{e}]"
        shard = 0 if proj == "gate_proj" else 1
        _copy(experts.w13[e, shard * i : (shard + 1) * i], tensor, name)
        return f"mlp.experts.w13[{e}]#{shard}"

    def checkpoint_shapes(self) -> dict[str, tuple[int, ...]]:
        """The checkpoint names (relative to the layer) ``load_weight`` takes, with their shapes:
        the inverse of the slot mapping (random MTP weights, tests)."""
        out: dict[str, tuple[int, ...]] = {}
        for name, module in self.named_modules():
            prefix = f"{name}." if name else ""
            if isinstance(module, MergedLinear):
                for proj, size in zip(("gate_proj", "up_proj"), module.shard_sizes):
                    out[f"{prefix[: -len('gate_up_proj.')]}{proj}.weight"] = (size, module.in_features)
            elif isinstance(module, StackedExperts):
                i, h = module.intermediate, module.hidden
                for e in range(module.num_experts):
                    out |= {f"{prefix}{e}.gate_proj.weight": (i, h), f"{prefix}{e}.up_proj.weight": (i, h), f"{prefix}{e}.down_proj.weight": (h, i)}
            else:
                out |= {prefix + n: tuple(p.shape) for n, p in module.named_parameters(recurse=False) if p is not None}
        return out

    def absorb(self) -> None:
        """After loading: the attention's absorbed weights (``MLAttention.absorb``) and the
        experts' path probe (``StackedExperts.prepare``)."""
        self.self_attn.absorb()
        if isinstance(self.mlp, DeepseekMoE):
            self.mlp.experts.prepare()


def _check_shape(dst: torch.Tensor, src: torch.Tensor, name: str) -> None:
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(f"{name}: expected shape {tuple(dst.shape)}, checkpoint has {tuple(src.shape)}")


def _copy(dst: torch.Tensor, src: torch.Tensor, name: str) -> None:
    _check_shape(dst, src, name)
    with torch.no_grad():
        dst.copy_(src)


def _missing_error(missing: Iterable[str]) -> ValueError:
    names = sorted(missing)
    shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
    return ValueError(f"checkpoint is missing {len(names)} tensors: {shown}")


def load_layer_weights(layer: DeepseekDecoderLayer, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Fill one decoder layer from tensors named relative to it (an MTP drafter's layer); every
    slot exactly once, then the absorbed weights are built."""
    filled: set[str] = set()
    for name, tensor in weights:
        slot = layer.load_weight(name, tensor)
        if slot in filled:
            raise ValueError(f"checkpoint tensor {name!r} appears twice")
        filled.add(slot)
    missing = layer.weight_slots() - filled
    if missing:
        raise _missing_error(missing)
    layer.absorb()


class DeepseekModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DeepseekDecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DeepseekForCausalLM(DecoderLM):
    """DeepSeek-V2 / V3 causal LM over a paged latent KV cache (``torch_native`` serves it)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        shape = _shape(cfg)
        self.config = cfg
        self.model = DeepseekModel(cfg)
        self.rotary = RotaryEmbedding(shape.mla.qk_rope_head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @staticmethod
    def keeps_float32(name: str) -> bool:
        """Checkpoint tensors the loader must not round to the model dtype."""
        return name.endswith("e_score_correction_bias")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load Hugging Face-named tensors; every parameter slot exactly once. MTP layers'
        tensors (``model.layers.{L+i}``, i < num_nextn_predict_layers) are skipped."""
        cfg, mtp = self.config, _shape(self.config).num_nextn_predict_layers
        top = {n: p for n, p in self.named_parameters() if not n.startswith("model.layers.")}
        filled: set[str] = set()
        for name, tensor in weights:
            if "rotary_emb.inv_freq" in name or (name == "lm_head.weight" and self.lm_head is None):
                continue
            parts = name.split(".", 3)
            if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[2].isdigit():
                index = int(parts[2])
                if cfg.num_layers <= index < cfg.num_layers + mtp:
                    continue  # an MTP layer: the drafter's (deepseek_mtp.load_mtp_state)
                if index >= cfg.num_layers:
                    raise ValueError(
                        f"checkpoint tensor {name!r}: layer {index} is past the {cfg.num_layers} layers "
                        f"and {mtp} MTP layers of this config"
                    )
                slot = f"model.layers.{index}.{self.model.layers[index].load_weight(parts[3], tensor)}"
            elif name in top:
                _copy(top[name], tensor, name)
                slot = name
            else:
                raise ValueError(f"checkpoint tensor {name!r} has no place in {cfg.architecture}")
            if slot in filled:
                raise ValueError(f"checkpoint tensor {name!r} appears twice")
            filled.add(slot)
        expected = set(top)
        for i, layer in enumerate(self.model.layers):
            expected |= {f"model.layers.{i}.{s}" for s in layer.weight_slots()}
        if expected - filled:
            raise _missing_error(expected - filled)

    def post_load(self, max_positions: int | None = None) -> None:
        super().post_load(max_positions)
        for layer in self.model.layers:
            layer.absorb()


class DeepseekV2ForCausalLM(DeepseekForCausalLM):
    pass


class DeepseekV3ForCausalLM(DeepseekForCausalLM):
    pass

"""Training-side forward of EAGLE / EAGLE-3 heads, unrolled over draft steps.

The inference forward (``updraft.models.eagle``) runs one ``ForwardBatch`` through the paged KV
engine and the fused ops (Triton on CUDA, which have no autograd). Training needs a dense,
differentiable forward over padded ``[B, L]`` sequences; this module computes it from the SAME
modules and parameters (``head.fc``, ``head.layers``, ``head.midlayer``, norms, ``lm_head``,
the target's embedding and LM head through ``head.shared``) with the pure-torch op references
(``updraft.ops.reference``), so a head trained here serves unchanged. tests/train/test_forward.py
checks it against the engine's EXTEND and DRAFT_DECODE paths.

Position convention (the engine's, see ``updraft.spec.proposers``): at draft position ``j`` the
head reads token ``t[j+1]`` and the feature of position ``j``; its output at ``j`` predicts
``t[j+2]`` (the target's distribution at ``j+1``) and, for EAGLE-1, regresses the target's
feature at ``j+1``.

Training-time test (EAGLE-3 style, any number of steps, also for EAGLE-1): step ``k`` row ``j``
is the ``k``-th draft step of a chain that left the target at position ``j``. It sits at position
``j+k``, reads token ``t[j+k+1]`` (the accepted path: drafts that matched the target's tokens)
and its own step ``k-1`` output feature of row ``j`` (step 0: the target's feature), and predicts
``t[j+k+2]``. Its attention sees exactly the draft KV the engine would hold then: step-0 keys at
positions ``<= j`` (written by draft extend from target features) plus the keys of the same
chain's steps ``1..k`` (row ``j`` of each step: the "diagonal").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from updraft.models.eagle import Eagle3Head, EagleHead
from updraft.models.layers import GatedMLP, RMSNorm
from updraft.models.llama import LlamaAttention, LlamaDecoderLayer
from updraft.ops import reference

Head = EagleHead | Eagle3Head


def norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """RMSNorm through the differentiable reference (an ``nn.Identity`` passes ``x``)."""
    if isinstance(module, RMSNorm):
        return reference.rmsnorm(x, module.weight, module.eps)
    return x


def mlp(module: GatedMLP, x: torch.Tensor) -> torch.Tensor:
    return module.down_proj(reference.silu_and_mul(module.gate_up_proj(x)))


@dataclass
class LayerKV:
    """One head layer's keys/values across draft steps, GQA-expanded to ``[B, H, L, D]``:
    step 0 (attended causally) and, per later step, one key/value per row (the diagonal)."""

    k0: torch.Tensor | None = None
    v0: torch.Tensor | None = None
    diag_k: list[torch.Tensor] = field(default_factory=list)
    diag_v: list[torch.Tensor] = field(default_factory=list)


def attention(
    attn: LlamaAttention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: LayerKV
) -> torch.Tensor:
    """Self-attention of ``x`` [B, L, in] for one draft step; appends this step's K/V to ``kv``."""
    bsz, length, _ = x.shape
    h, hkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    q, k, v = attn.qkv_proj(x).split([attn.q_size, attn.kv_size, attn.kv_size], dim=-1)
    q = q.reshape(bsz, length, h, d)
    k = k.reshape(bsz, length, hkv, d)
    v = v.reshape(bsz, length, hkv, d)
    if attn.q_norm is not None and attn.k_norm is not None:
        q, k = norm(attn.q_norm, q), norm(attn.k_norm, k)
    # Out-of-place rotate-half: the engine's in-place rotary_ writes exactly these values.
    # (Cast back to v's dtype: under autocast the projections are bf16 while the RoPE table is
    # fp32; the engine rotates in the model dtype too.)
    q = reference.rotate_half(q, cos, sin).to(v.dtype).transpose(1, 2)  # [B, H, L, D]
    k = reference.rotate_half(k, cos, sin).to(v.dtype).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    v = v.transpose(1, 2).repeat_interleave(h // hkv, dim=1)  # query head i reads kv head i // (h/hkv)
    scale = d**-0.5
    if kv.k0 is None:  # step 0: plain causal attention over the sequence
        kv.k0, kv.v0 = k, v
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    else:
        kv.diag_k.append(k)
        kv.diag_v.append(v)
        assert kv.v0 is not None
        # One attention over [step-0 keys | each later step's keys]: row j sees step-0 keys 0..j
        # (never empty) and, of every later step's block, only its own row j (the diagonal).
        steps = len(kv.diag_k)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        diag = torch.eye(length, dtype=torch.bool, device=x.device)
        mask = torch.cat([causal, *([diag] * steps)], dim=1)  # [L, L * (1 + steps)]
        keys = torch.cat([kv.k0, *kv.diag_k], dim=2)
        values = torch.cat([kv.v0, *kv.diag_v], dim=2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale)
    return attn.o_proj(out.transpose(1, 2).reshape(bsz, length, h * d))


def rope(head: Head, length: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-width cos/sin [L, 1, D] for positions ``offset .. offset + L - 1``."""
    table = head.rotary.cos_sin
    if length > table.shape[0]:
        raise ValueError(f"training sequences of {length} tokens exceed the head's RoPE table of {table.shape[0]} positions")
    # Step k's last k rows sit past the sequence: nothing is trained there and no valid row
    # attends to them, so clamping their positions to the table is harmless.
    pos = torch.arange(offset, offset + length, device=table.device).clamp(max=table.shape[0] - 1)
    return reference.cos_sin_at(pos, table)


def decoder_layers(layers: Iterable[LlamaDecoderLayer], x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   kvs: list[LayerKV]) -> torch.Tensor:
    """Standard pre-norm decoder layers on the residual stream ``x`` (an ``nn.Identity`` input
    norm passes it: EAGLE-1's layer 0)."""
    for layer, kv in zip(layers, kvs, strict=True):
        x = x + attention(layer.self_attn, norm(layer.input_layernorm, x), cos, sin, kv)
        x = x + mlp(layer.mlp, norm(layer.post_attention_layernorm, x))
    return x


def eagle_step(head: EagleHead, tokens: torch.Tensor, feat: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kvs: list[LayerKV]) -> torch.Tensor:
    """One EAGLE-1 step: ``fc(embed ‖ feature)`` then the decoder layers (layer 0 has no input
    norm); returns the output feature [B, L, h] (no final norm: it is the residual stream)."""
    emb = head.shared.embed(tokens)
    x = head.fc(torch.cat([emb, feat.to(emb.dtype)], dim=-1))
    return decoder_layers(head.layers, x, cos, sin, kvs)  # type: ignore[arg-type]


def eagle3_step(head: Eagle3Head, tokens: torch.Tensor, feat: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kvs: list[LayerKV]) -> torch.Tensor:
    """One EAGLE-3 step over a projected feature [B, L, h]: the mid layer's attention input is
    ``input_layernorm(embed) ‖ hidden_norm(feature)`` and the feature is its residual; any
    further layers (``head.layers``) run on its output stream. ``kvs``: one per layer."""
    mid = head.midlayer
    emb = head.shared.embed(tokens)
    x = torch.cat([norm(mid.input_layernorm, emb), norm(mid.hidden_norm, feat)], dim=-1)
    r = feat + attention(mid.self_attn, x, cos, sin, kvs[0])
    r = r + mlp(mid.mlp, norm(mid.post_attention_layernorm, r))
    return decoder_layers(head.layers.values(), r, cos, sin, kvs[1:])  # type: ignore[arg-type]


def shift_left(x: torch.Tensor, k: int, fill: int = 0) -> torch.Tensor:
    """``x[:, j + k]`` at ``[:, j]`` along dim 1, padded with ``fill`` past the end."""
    if k == 0:
        return x
    pad = x.new_full((x.shape[0], k, *x.shape[2:]), fill)
    return torch.cat([x[:, k:], pad], dim=1)


def unroll(head: Head, ids: torch.Tensor, target_feature: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Output features of ``steps`` chained draft steps, each [B, L, h] (row ``j`` of step ``k``
    is at position ``j+k``; see the module docstring). ``ids`` [B, L] token ids of the padded
    sequences; ``target_feature`` [B, L, F]: the target's final normed hidden (EAGLE-1) or its
    three-layer concat (EAGLE-3, projected here by ``fc``). Right padding only: causal attention
    never lets a real row see a padded one."""
    if steps < 1:
        raise ValueError(f"steps={steps} must be >= 1")
    _, length = ids.shape
    outs: list[torch.Tensor] = []
    if isinstance(head, Eagle3Head):
        feat = head.fc(target_feature.to(head.fc.weight.dtype) if not torch.is_autocast_enabled() else target_feature)
        kvs = [LayerKV() for _ in range(head.config.num_layers)]
        for k in range(steps):
            cos, sin = rope(head, length, k)
            feat = eagle3_step(head, shift_left(ids, k + 1), feat, cos, sin, kvs)
            outs.append(feat)
        return outs
    feat = target_feature
    kvs = [LayerKV() for _ in head.layers]
    for k in range(steps):
        cos, sin = rope(head, length, k)
        feat = eagle_step(head, shift_left(ids, k + 1), feat, cos, sin, kvs)
        outs.append(feat)
    return outs


def head_logits(head: Head, feature: torch.Tensor) -> torch.Tensor:
    """Logits of output features (any leading dims): EAGLE-1 through the target's LM head,
    EAGLE-3 through ``norm`` and its own draft-vocabulary ``lm_head``."""
    if isinstance(head, Eagle3Head):
        return head.lm_head(norm(head.norm, feature))
    return F.linear(feature, head.shared.lm_head_weight())

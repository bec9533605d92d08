"""The Llama decoder layer on the small-M kernels (``updraft.ops.gemv``): five launches per layer.

At M <= 64 token rows (decode, verify, draft steps; ``ops.small_m`` decides from shapes, dtypes
and devices only, so a CUDA graph captures the same path it would run eagerly) a layer is

1. RMSNorm + QKV projection (+ bias) + RoPE of q and k + k, v into the KV pool
   (``gemv.qkv_rope_store``; layer 0 of a target gathers its embedding rows and normalises them
   in the same kernel);
2. attention over the pool (``AttentionBackend.forward_stored``: the backend's decode or extend
   kernel, nothing stored again);
3. o_proj + residual add, its rows left ready for the post-attention norm
   (``gemv.linear_add_norm`` -> ``gemv.NormedRows``: the sum, the sum times the norm weight, one
   partial sum of squares per program);
4. RMSNorm (from those) + gate/up projection + SiLU-mul (``gemv.gate_up_silu``);
5. down_proj: between two fused layers of a stack (``DecoderLM._layers``) it adds the residual and
   prepares the next layer's input norm the same way (``decoder_layer_normed``); else a plain
   GEMM, and the layer returns the model's ``(mlp_out, residual)`` for the next norm to add.

The final norm can run inside the LM head, which also yields the greedy argmax
(``norm_lm_head``; off by default on the auto backend).

Fallbacks (the unfused code for the part a kernel does not cover, the rest still fused):
Qwen3's per-head q/k norm and backends or pools the fused KV store does not serve (``stored_kv``
False, V narrower than K or shared with it, a pool dtype other than the activations') keep the
norm-prologue QKV GEMM, then ``LlamaAttention.attend`` (q/k norm, the backend's rotary + store).
EAGLE-3's mid layer (``eagle3_midlayer``) is five launches too: its QKV prologue gathers the
embedding rows and normalises them and the feature each with its own norm (``Prologue.x2``), and
its o_proj adds the feature (the residual) and prepares the post-attention norm; where the fused KV store does
not serve, the layer normalises and concatenates its inputs itself and takes the fused attention
and MLP without prologues. Its QKV can also take the feature's half of the product computed
apart (``eagle3_feature_qkv``, before the tokens are known) and stream only the embedding's
weight columns.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
from torch import nn

from updraft import ops
from updraft.attention.base import SplitPartials
from updraft.batch import ForwardBatch

FUSED_LM_HEAD = os.environ.get("UPDRAFT_FUSED_LM_HEAD", "0") not in ("", "0")

if TYPE_CHECKING:
    from updraft.models.eagle import Eagle3Layer
    from updraft.models.layers import GatedMLP, RMSNorm, RotaryEmbedding
    from updraft.models.llama import LlamaAttention, LlamaDecoderLayer
    from updraft.ops.gemv import NormedRows, Prologue


def _gemv():  # noqa: ANN202 - the kernel module, imported only where the fused path runs
    from updraft.ops import gemv

    return gemv


def no_prologue() -> Prologue:
    return _gemv().NO_PROLOGUE


def input_prologue(norm: RMSNorm | nn.Module, x: torch.Tensor, residual: torch.Tensor | None,
                   ids: torch.Tensor | None = None) -> tuple[Prologue, torch.Tensor | None]:
    """The prologue computing ``norm(x + residual)`` (or of rows ``ids`` of the table ``x``) and the
    residual stream after it: returned at once when the kernel need not write it (it is ``x``),
    else None (the kernel returns it)."""
    gemv = _gemv()
    weight = getattr(norm, "weight", None)
    eps = float(getattr(norm, "eps", 1e-6))
    if ids is not None:
        return gemv.Prologue(norm_weight=weight, eps=eps, ids=ids, write_residual=True), None
    if residual is None:
        return gemv.Prologue(norm_weight=weight, eps=eps), x
    return gemv.Prologue(norm_weight=weight, eps=eps, residual=residual, write_residual=True), None


def _pools(attn: LlamaAttention, batch: ForwardBatch, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The layer's K and V pools when the fused QKV kernel may write them itself."""
    backend = batch.attn_backend
    if backend is None or not backend.stored_kv or attn.q_norm is not None:
        return None
    pool = backend.kv_pool
    if pool.shared_kv or pool.v_head_dim != pool.head_dim or pool.dtype != dtype:
        return None
    return pool.k_buffer[attn.layer_id], pool.v_buffer[attn.layer_id]


def _qkv_weight(attn: LlamaAttention, x: torch.Tensor, split: bool) -> torch.Tensor:
    """The QKV weight a launch streams: ``split`` (the product of the columns after ``x``'s comes
    computed apart, as an addend), only ``x``'s columns."""
    w = attn.qkv_proj.weight
    return w[:, : x.shape[1]] if split else w


def _qkv_attend(attn: LlamaAttention, x: torch.Tensor, pro: Prologue, batch: ForwardBatch,
                rotary: RotaryEmbedding, addend: torch.Tensor | None = None, split_ok: bool = False,
                ) -> tuple[torch.Tensor | SplitPartials, torch.Tensor | None]:
    """attention(qkv(prologue(x)) + addend) -> (output [M, q_size], new residual or None).
    ``split_ok``: the output may come as the backend's unmerged split partials (the caller folds
    the merge into its o_proj: ``gemv_merge``) where the backend hands them over."""
    gemv = _gemv()
    t = gemv.num_rows(x, pro)
    w, b = _qkv_weight(attn, x, addend is not None), attn.qkv_proj.bias
    pools = _pools(attn, batch, x.dtype)
    if pools is not None and gemv.qkv_supported(x, w, pro, attn.num_heads, attn.num_kv_heads, attn.head_dim,
                                                pools[0], pools[1], rotary.cos_sin):
        qkv, new_res = gemv.qkv_rope_store(
            x, w, b, pro, num_heads=attn.num_heads, num_kv_heads=attn.num_kv_heads, head_dim=attn.head_dim,
            k_pool=pools[0], v_pool=pools[1], loc=batch.out_cache_loc, positions=batch.positions,
            cos_sin=rotary.cos_sin, addend=addend)
        q, k, v = attn.split_heads(qkv)
        backend = batch.attn_backend
        assert backend is not None
        parts = backend.forward_stored_split(q, k, v, attn.layer_id, batch) if split_ok else None
        if parts is not None:
            return parts, new_res
        o = backend.forward_stored(q, k, v, attn.layer_id, batch)
    else:
        if addend is not None:  # callers check eagle3_ok(..., split=True) first
            raise AssertionError("a QKV addend needs the fused KV store")
        qkv, new_res, _ = gemv.linear(x, w, b, pro)
        o = attn.attend(qkv, batch, rotary)
    return o.reshape(t, attn.q_size), new_res


def attention(attn: LlamaAttention, x: torch.Tensor, pro: Prologue, batch: ForwardBatch,
              rotary: RotaryEmbedding) -> tuple[torch.Tensor, torch.Tensor | None]:
    """o_proj(attention(qkv(prologue(x)))) -> (output [M, hidden], new residual or None)."""
    o, new_res = _qkv_attend(attn, x, pro, batch, rotary)
    out, _, _ = _gemv().linear(o, attn.o_proj.weight)
    return out, new_res


def mlp(mlp: GatedMLP, x: torch.Tensor, pro: Prologue) -> tuple[torch.Tensor, torch.Tensor | None]:
    """down(silu(gate) * up) of ``prologue(x)`` -> (output [M, hidden], new residual or None)."""
    gemv = _gemv()
    act, new_res = gemv.gate_up_silu(x, mlp.gate_up_proj.weight, pro)
    out, _, _ = gemv.linear(act, mlp.down_proj.weight)
    return out, new_res


def _attention_half(layer: LlamaDecoderLayer | Eagle3Layer, x: torch.Tensor, pro: Prologue,
                    residual: torch.Tensor | None, batch: ForwardBatch, rotary: RotaryEmbedding,
                    addend: torch.Tensor | None = None) -> NormedRows:
    """The layer's attention half, its o_proj adding to the residual stream (``residual``, or the
    one the QKV prologue wrote) and leaving it ready for the post-attention norm."""
    attn = layer.self_attn
    o, new_res = _qkv_attend(attn, x, pro, batch, rotary, addend, split_ok=_merge_fold_ok(attn, x))
    stream = new_res if new_res is not None else residual
    assert stream is not None
    post = layer.post_attention_layernorm
    stream = stream if stream.stride(1) == 1 else stream.contiguous()  # any row stride (a captured feature's block)
    if isinstance(o, SplitPartials):
        from updraft.ops import gemv_merge

        return gemv_merge.merge_linear_add_norm(o.mid_o, o.mid_lse, attn.o_proj.weight, stream, post.weight, post.eps,
                                                pdl=o.pdl)
    return _gemv().linear_add_norm(o, attn.o_proj.weight, stream, post.weight, post.eps)


def _merge_fold_ok(attn: LlamaAttention, x: torch.Tensor) -> bool:
    """Whether the o_proj GEMV may take the attention's split merge (``gemv_merge``): no o_proj
    bias, heads of a power-of-two width >= 16, the activations' dtype (the backend decides the rest)."""
    d, w = attn.head_dim, attn.o_proj.weight
    return (attn.o_proj.bias is None and d >= 16 and d & (d - 1) == 0 and w.dtype == x.dtype
            and w.shape[1] == attn.num_heads * d and w.stride(1) == 1)


def _layer_input(layer: LlamaDecoderLayer, x: torch.Tensor, residual: torch.Tensor | None,
                 ids: torch.Tensor | None, normed: NormedRows | None,
                 ) -> tuple[torch.Tensor, Prologue, torch.Tensor | None]:
    """(GEMM rows, prologue, residual stream or None when the QKV kernel writes it)."""
    if normed is not None:
        return normed.scaled, _gemv().Prologue(normed=normed), normed.stream
    pro, residual = input_prologue(layer.input_layernorm, x, residual, ids)
    return x, pro, residual


def _layer_act(layer: LlamaDecoderLayer | Eagle3Layer, x: torch.Tensor, pro: Prologue, residual: torch.Tensor | None,
               batch: ForwardBatch, rotary: RotaryEmbedding, addend: torch.Tensor | None = None,
               ) -> tuple[torch.Tensor, NormedRows]:
    """A layer up to its down projection: (silu(gate) * up [M, I], the stream after attention)."""
    mid = _attention_half(layer, x, pro, residual, batch, rotary, addend)
    gemv = _gemv()
    act, _ = gemv.gate_up_silu(mid.scaled, layer.mlp.gate_up_proj.weight, gemv.Prologue(normed=mid))
    return act, mid


def decoder_layer(layer: LlamaDecoderLayer, x: torch.Tensor, residual: torch.Tensor | None, batch: ForwardBatch,
                  rotary: RotaryEmbedding, ids: torch.Tensor | None = None,
                  normed: NormedRows | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``LlamaDecoderLayer.forward`` in five launches: ``(mlp_out, residual)``. ``ids``: ``x`` is
    the embedding table and the layer's input is its rows ``ids`` (the first layer of a target);
    ``normed``: the input is the previous layer's ``decoder_layer_normed`` output (x, residual
    unused)."""
    act, mid = _layer_act(layer, *_layer_input(layer, x, residual, ids, normed), batch, rotary)
    out, _, _ = _gemv().linear(act, layer.mlp.down_proj.weight)
    return out, mid.stream


def decoder_layer_normed(layer: LlamaDecoderLayer, x: torch.Tensor, residual: torch.Tensor | None,
                         batch: ForwardBatch, rotary: RotaryEmbedding, next_norm: RMSNorm,
                         ids: torch.Tensor | None = None, normed: NormedRows | None = None,
                         stream_out: torch.Tensor | None = None) -> NormedRows:
    """``decoder_layer`` whose down projection adds to the residual stream and leaves it ready for
    ``next_norm`` (the next fused layer's input norm): that layer's QKV makes no pass of its own
    over the rows for the norm. ``stream_out``: where the new stream lands (any row stride)."""
    act, mid = _layer_act(layer, *_layer_input(layer, x, residual, ids, normed), batch, rotary)
    return _gemv().linear_add_norm(act, layer.mlp.down_proj.weight, mid.stream, next_norm.weight, next_norm.eps,
                                   stream_out=stream_out)


def _eagle3_qkv_prologue(layer: Eagle3Layer, ids: torch.Tensor, feat: torch.Tensor, split: bool) -> Prologue:
    """The mid layer's QKV input: both normalised inputs, or (``split``) the embedding rows alone,
    the feature's product coming as an addend (``eagle3_feature_qkv``)."""
    n1, n2 = layer.input_layernorm, layer.hidden_norm
    if split:
        return _gemv().Prologue(norm_weight=n1.weight, eps=n1.eps, ids=ids)
    return _gemv().Prologue(norm_weight=n1.weight, eps=n1.eps, ids=ids, x2=feat, norm_weight2=n2.weight)


def eagle3_ok(layer: Eagle3Layer, table: torch.Tensor, ids: torch.Tensor, feat: torch.Tensor, batch: ForwardBatch,
              rotary: RotaryEmbedding, split: bool = False) -> bool:
    """Whether ``eagle3_midlayer`` covers these inputs: small-M rows, the fused KV store, both
    norms with one eps, one dtype throughout. ``split``: with the feature's QKV product computed
    apart (``eagle3_feature_qkv``)."""
    attn = layer.self_attn
    if (not ops.small_m(feat, attn.gemms + layer.mlp.gemms) or ids.shape[0] != feat.shape[0]
            or layer.input_layernorm.eps != layer.hidden_norm.eps):
        return False
    pools = _pools(attn, batch, feat.dtype)
    gemv = _gemv()
    pro = _eagle3_qkv_prologue(layer, ids, feat, split)
    ok = pools is not None and gemv.qkv_supported(table, _qkv_weight(attn, table, split), pro, attn.num_heads,
                                                  attn.num_kv_heads, attn.head_dim, pools[0], pools[1], rotary.cos_sin)
    if split:
        n2 = layer.hidden_norm
        ok = ok and gemv.supported(feat, attn.qkv_proj.weight[:, table.shape[1]:], gemv.Prologue(norm_weight=n2.weight))
    return ok


def eagle3_feature_qkv(layer: Eagle3Layer, feat: torch.Tensor) -> torch.Tensor:
    """The mid layer's QKV product of its normalised feature (float32 [M, N]): what
    ``eagle3_midlayer``'s QKV adds when given it (``qkv``), the rest of its input being the
    tokens' embedding rows. Needs no token: the fused iteration computes it on a side stream
    before the tokens are known (``Eagle3Head.feature_qkv_for``)."""
    n2 = layer.hidden_norm
    return _gemv().feature_product(feat, layer.self_attn.qkv_proj.weight, n2.weight, n2.eps)


def eagle3_store_kv(layer: Eagle3Layer, table: torch.Tensor, ids: torch.Tensor, qkv: torch.Tensor,
                    batch: ForwardBatch, rotary: RotaryEmbedding, positions: torch.Tensor, loc: torch.Tensor) -> None:
    """The mid layer's keys and values of rows ``ids`` of the embedding ``table`` whose features'
    QKV product is ``qkv`` (``eagle3_feature_qkv``), rotated at ``positions`` and stored at slots
    ``loc`` of ``batch``'s pool, with no attention after them (one launch; its q rows are
    dropped). Callers check ``eagle3_ok(..., split=True)`` for ``batch`` first."""
    attn = layer.self_attn
    pools = _pools(attn, batch, table.dtype)
    if pools is None:
        raise AssertionError("eagle3_store_kv needs the fused KV store")
    _gemv().qkv_rope_store(
        table, _qkv_weight(attn, table, True), attn.qkv_proj.bias, _eagle3_qkv_prologue(layer, ids, qkv, True),
        num_heads=attn.num_heads, num_kv_heads=attn.num_kv_heads, head_dim=attn.head_dim, k_pool=pools[0],
        v_pool=pools[1], loc=loc, positions=positions, cos_sin=rotary.cos_sin, addend=qkv)


def eagle3_midlayer(layer: Eagle3Layer, table: torch.Tensor, ids: torch.Tensor, feat: torch.Tensor,
                    batch: ForwardBatch, rotary: RotaryEmbedding,
                    qkv: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``Eagle3Layer.forward`` on rows ``ids`` of the embedding ``table`` in five launches:
    ``(mlp_out, residual)``, the residual ``attn_out + feat`` (``feat`` is not modified). ``qkv``:
    the feature's QKV product (``eagle3_feature_qkv``), the QKV launch then streams only the
    embedding's weight columns."""
    pro = _eagle3_qkv_prologue(layer, ids, feat, qkv is not None)
    act, mid = _layer_act(layer, table, pro, feat, batch, rotary, qkv)
    out, _, _ = _gemv().linear(act, layer.mlp.down_proj.weight)
    return out, mid.stream


def eagle3_midlayer_normed(layer: Eagle3Layer, table: torch.Tensor, ids: torch.Tensor, feat: torch.Tensor,
                           batch: ForwardBatch, rotary: RotaryEmbedding, norm: RMSNorm,
                           qkv: torch.Tensor | None = None) -> NormedRows:
    """``eagle3_midlayer`` whose down projection adds the residual in its epilogue and leaves the
    sum ready for ``norm`` (the head's final norm): ``stream`` is the output feature, ``scaled``
    its rows times the norm weight (the normalised rows up to each row's positive ``rstd``)."""
    pro = _eagle3_qkv_prologue(layer, ids, feat, qkv is not None)
    act, mid = _layer_act(layer, table, pro, feat, batch, rotary, qkv)
    return _gemv().linear_add_norm(act, layer.mlp.down_proj.weight, mid.stream, norm.weight, norm.eps)


def norm_lm_head(h: torch.Tensor, residual: torch.Tensor | None, norm: RMSNorm, weight: torch.Tensor,
                 rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [R, V] float32 of ``norm(h + residual)[rows]`` (rounded to h's dtype, then widened,
    as ``linear(...).float()``) and their argmax [R], in one launch."""
    pro = _gemv().Prologue(norm_weight=norm.weight, eps=norm.eps, residual=residual, ids=rows)
    logits, _, best = _gemv().linear(h, weight, None, pro, out_dtype=torch.float32, argmax=True)
    assert best is not None
    return logits, best


def lm_head_ok(h: torch.Tensor, residual: torch.Tensor | None, norm: RMSNorm, weight: torch.Tensor,
               rows: torch.Tensor) -> bool:
    """Whether ``norm_lm_head`` covers these inputs (small-M rows, one dtype throughout). Off
    under the "auto" ops backend unless ``UPDRAFT_FUSED_LM_HEAD=1``: on the H100 the fused head
    took 50 us against cuBLAS's 23 (SmolLM2, 49k x 576, untuned config), more than the two
    launches it saves."""
    if ops.backend() != "triton" and not FUSED_LM_HEAD:
        return False
    if rows.numel() == 0 or not (1 <= rows.numel() <= _gemv().ARGMAX_MAX_M):
        return False
    gemv = _gemv()
    return gemv.supported(h, weight, gemv.Prologue(norm_weight=norm.weight, residual=residual, ids=rows))


#: Rows the FP8 draft LM head serves (``Eagle3Head.quantize_lm_head``): chain steps and
#: verify-sized extends of small batches; more rows take the model-dtype weight on cuBLAS.
FP8_MAX_ROWS = 16


def lm_head_fp8(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor | None:
    """Logits [R, V] float32 of rows ``x`` [R, H] against the FP8 weight ``q`` with its row
    ``scale`` (rounded to x's dtype, then widened, as ``lm_head(x).float()``), or None where the
    small-M kernel does not run: the torch ops backend, no CUDA outside the interpreter, more
    than ``FP8_MAX_ROWS`` rows, or on CUDA no launch config tuned for this GPU, shape and M
    bucket (a heuristic tile can lose to cuBLAS on the bf16 weight; the same rule as the fused
    layers' wide GEMMs)."""
    if ops.backend() == "torch" or not ops.triton_available() or not (x.is_cuda or ops.interpreting()):
        return None
    if not 1 <= x.shape[0] <= FP8_MAX_ROWS or not _gemv().supported(x, q, w_scale=scale):
        return None
    if x.is_cuda:
        from updraft.ops import gemv_config

        n, k = q.shape
        if not gemv_config.is_tuned("linear", n, k, gemv_config.m_bucket(x.shape[0]), _gemv().FP8, x.device):
            return None
    return _gemv().linear(x, q, None, out_dtype=torch.float32, w_scale=scale)[0]

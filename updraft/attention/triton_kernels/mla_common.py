"""What the MLA kernels (``mla_decode``, ``mla_extend``) share: H query heads over ONE latent KV head.

Layout (DeepSeek-V2/V3 MLA with the up-projections absorbed by the model): a cache row is
``[c | k_rope]``, ``DV + DR`` columns (``kv_lora_rank`` + ``qk_rope_head_dim``: 512 + 64 on the
real models), and V is ``c`` itself (the pool's ``shared_kv``: stored once). A query row is
``[q_nope . W_UK | q_rope]`` of the same width; the output row is ``DV`` wide (the model applies
W_UV afterwards). Per block of keys the score is two dots, ``q_c . c^T + q_r . k_rope^T`` (the
512 and the 64 parts, so neither is padded to a power of two: 576 would pad to 1024), and the
output accumulates ``p . c``: each latent tile is loaded ONCE and serves as K and as V.

Rows: a program's M dimension holds ``BLOCK_M`` (token, head) pairs of one request, token-major
(row ``r`` = token ``r // H``, head ``r % H``): the heads of a token, then the next token's. A
decode program covers BLOCK_M heads, a verify program ndt tokens x H heads, and every row of a
program reads the same latent rows, so one KV tile feeds BLOCK_M query rows (the bandwidth
argument of MLA decode: the cache is read once per head block, not once per head).

Numerics: as ``triton_kernels`` (IEEE fp32 dots for fp32, fp32 accumulation, exp2 softmax with
the scale times log2(e); ``DOT_F32`` upcasts dot operands under the interpreter, whose bf16 dot
is wrong). P is rounded to the query dtype before the PV dot (tensor cores on bf16).
"""

from __future__ import annotations

import triton
import triton.language as tl

from updraft.attention.triton_kernels import dot_precision, next_pow2


@triton.jit
def load_query_rows(Q, qrow, head, rvalid, stride_qt, stride_qh, dv, dr, DV: tl.constexpr, DR: tl.constexpr,
                    DOT_F32: tl.constexpr):
    """The latent part ``[M, BLOCK_DV]`` and the rope part ``[M, BLOCK_DR]`` of the query rows."""
    base = Q + qrow[:, None] * stride_qt + head[:, None] * stride_qh
    qc = tl.load(base + dv[None, :], mask=rvalid[:, None] & (dv[None, :] < DV), other=0.0)
    qr = tl.load(base + DV + dr[None, :], mask=rvalid[:, None] & (dr[None, :] < DR), other=0.0)
    if DOT_F32:
        qc = qc.to(tl.float32)
        qr = qr.to(tl.float32)
    return qc, qr


@triton.jit
def latent_block(qc, qr, m_i, l_i, acc, Lat, rows, stride_r, rmask, allowed, dv, dr, scale_log2, DV: tl.constexpr,
                 DR: tl.constexpr, PV_DTYPE: tl.constexpr, DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr):
    """One block of latent rows: ``Lat + rows * stride_r`` (pool slots, or rows of this forward's
    new keys), masked by ``rmask`` [N]; ``allowed`` [M, N] (or [1, N]) says which pairs may
    attend. Returns the online-softmax update of (m, l, acc). Safe for query rows that have seen
    no allowed key yet (m stays -inf and their weights 0): causal and tree masks, and splits
    that end before a row's first visible key, leave whole rows masked."""
    ptr = Lat + rows[:, None].to(tl.int64) * stride_r
    # Int64 before the multiply: slot * row stride overflows int32 on large pools.
    c = tl.load(ptr + dv[None, :], mask=rmask[:, None] & (dv[None, :] < DV), other=0.0)  # [N, BLOCK_DV]
    kr = tl.load(ptr + DV + dr[None, :], mask=rmask[:, None] & (dr[None, :] < DR), other=0.0)  # [N, BLOCK_DR]
    qk = tl.dot(qc, tl.trans(c.to(qc.dtype)), input_precision=DOT_PREC)
    qk = tl.dot(qr, tl.trans(kr.to(qr.dtype)), qk, input_precision=DOT_PREC)
    qk = tl.where(allowed, qk * scale_log2, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(qk - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(PV_DTYPE)
    v = c.to(PV_DTYPE)  # the same tile: V is the latent part of K
    if DOT_F32:
        p = p.to(tl.float32)
        v = v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PREC)
    return m_new, l_i, acc


@triton.jit
def store_rows(Out, MidO, MidLse, qrow, head, split, dv, rvalid, m_i, l_i, acc, stride_ot, stride_oh, stride_mt,
               stride_mh, stride_ms, stride_lt, stride_lh, DV: tl.constexpr, DIRECT: tl.constexpr):
    """The normalised output rows (``DIRECT``: one split), or this split's partial output and
    log2-sum-exp for ``merge``. A row without keys stores 0 and lse -inf (merged to 0, never NaN:
    unseeded capture metadata, failure class 8)."""
    has_keys = l_i > 0.0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    omask = rvalid[:, None] & (dv[None, :] < DV)
    if DIRECT:
        tl.store(Out + qrow[:, None] * stride_ot + head[:, None] * stride_oh + dv[None, :], out.to(Out.dtype.element_ty),
                 mask=omask)
    else:
        tl.store(MidO + qrow[:, None] * stride_mt + head[:, None] * stride_mh + split * stride_ms + dv[None, :], out,
                 mask=omask)
        lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        tl.store(MidLse + qrow * stride_lt + head * stride_lh + split, lse, mask=rvalid)


def latent_consts(v_head_dim: int, head_dim: int, dtype: object, dot_f32: bool) -> dict[str, object]:
    """Constexprs both kernels take for a cache row of ``head_dim`` columns whose first
    ``v_head_dim`` are the latent (V) part."""
    rope = head_dim - v_head_dim
    return dict(
        DV=v_head_dim,
        DR=rope,
        BLOCK_DV=max(16, next_pow2(v_head_dim)),
        BLOCK_DR=max(16, next_pow2(rope)),
        DOT_F32=dot_f32,
        DOT_PREC=dot_precision(dtype, dot_f32),  # type: ignore[arg-type]
    )


def grid_rows(tokens: int, num_heads: int, block_m: int) -> int:
    """Programs along M for ``tokens`` query tokens of ``num_heads`` heads each."""
    return triton.cdiv(tokens * num_heads, block_m)

"""MLA extend: new tokens over a cached latent prefix (EXTEND, DRAFT_EXTEND v1 packed,
DRAFT_EXTEND_V2 fixed stride; and the decode modes when the new rows are not stored).

Request ``b`` has ``kv_lens[b]`` prefix positions in the pool (read through ``req_to_token``) and
``ext_lens[b]`` new tokens whose latent rows are passed as a tensor (rows ``ext_start[b] ..
ext_start[b] + ext_lens[b]`` of ``k_new``), as the ``extend`` kernel of the triton backend does:
this forward's own rows are never read from the pool, so the result does not depend on whether
they were stored. New token ``i`` sees every prefix position and new tokens ``j <= i``, further
restricted by ``tree_mask[b, i, j]`` when ``TREE``. The kernel derives ``kv_lens = max(seq_lens -
ext_lens, 0)`` from the batch's ``seq_lens``: padded graph rows (``seq_lens`` = 1, ``ext_lens`` = the stride) have no prefix and attend inside
their own scratch block only.

This is MQA over the latent (prefill included: the K/V up-projections are not expanded per head,
so a prefill costs ``DV + DR`` = 576-wide dots per head instead of 192 + 128; correct and simple,
not the fastest prefill). Grid ``(cdiv(max_ext * H, BLOCK_M), B, num_splits)``: a program holds
BLOCK_M (token, head) rows of one request (``mla_common``), heaviest (most causal keys) first.
``max_ext`` sizes the grid and is a host scalar (the captured width under a graph: failure class
6); programs past a request's rows exit. Splits divide the prefix as in ``mla_decode``; the last
split also covers the new tokens; partials are merged by ``merge``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.attention.triton_kernels import TileConfig
from updraft.attention.triton_kernels.merge import merge_splits
from updraft.attention.triton_kernels.mla_common import (
    grid_rows,
    latent_block,
    latent_consts,
    load_query_rows,
    store_rows,
)
from updraft.attention.triton_kernels.slots import split_len
from updraft.ops.triton_utils import pdl_enter, pdl_opts, pdl_release_late


@triton.jit
def _mla_extend_kernel(
    Q, KNew, KPool, Out, MidO, MidLse, ReqToToken, ReqPoolIdx, SeqLens, ExtLens, ExtStart, TreeMask,
    stride_qt, stride_qh, stride_knt, stride_ks, stride_rt, stride_ot, stride_oh, stride_mt, stride_mh, stride_ms,
    stride_lt, stride_lh, stride_tb, stride_ti, scale_log2, num_splits,
    NUM_HEADS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DV: tl.constexpr, DR: tl.constexpr,
    BLOCK_DV: tl.constexpr, BLOCK_DR: tl.constexpr, MIN_SPLIT: tl.constexpr, TREE: tl.constexpr, DIRECT: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    # Heaviest (last rows: most causal keys) first, so the grid drains with a short tail.
    mblk = tl.num_programs(0) - 1 - tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)

    ext = tl.load(ExtLens + b)
    kv = tl.maximum(tl.load(SeqLens + b) - ext, 0)  # the prefix (0 in padded rows: seq 1 < ext)
    row0 = tl.load(ExtStart + b).to(tl.int64)
    rpi = tl.load(ReqPoolIdx + b).to(tl.int64)
    r0 = mblk * BLOCK_M
    live = r0 < ext * NUM_HEADS  # programs past this request's rows do nothing

    r = r0 + tl.arange(0, BLOCK_M)
    ti = r // NUM_HEADS
    head = r % NUM_HEADS
    rvalid = ti < ext
    qrow = row0 + ti
    dv = tl.arange(0, BLOCK_DV)
    dr = tl.arange(0, BLOCK_DR)
    qc, qr = load_query_rows(Q, qrow, head, rvalid, stride_qt, stride_qh, dv, dr, DV, DR, DOT_F32)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)

    # Phase 1: this split's share of the cached prefix, from the pool. Every query row sees it.
    span = split_len(kv, num_splits, BLOCK_N, MIN_SPLIT)
    lo = split * span
    hi = tl.where(live, tl.minimum(lo + span, kv), lo)
    table_row = ReqToToken + rpi * stride_rt
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        pmask = pos < hi
        slot = tl.load(table_row + pos, mask=pmask, other=0).to(tl.int64)
        m_i, l_i, acc = latent_block(qc, qr, m_i, l_i, acc, KPool, slot, stride_ks, pmask, pmask[None, :], dv, dr,
                                     scale_log2, DV, DR, Q.dtype.element_ty, DOT_F32, DOT_PREC)

    # Phase 2 (last split only): the new tokens up to this program's last row, causal, from k_new.
    j_end = tl.minimum((r0 + BLOCK_M - 1) // NUM_HEADS + 1, ext)
    j_end = tl.where(live & (split == num_splits - 1), j_end, 0)
    for j0 in range(0, j_end, BLOCK_N):
        j = j0 + tl.arange(0, BLOCK_N)
        jmask = j < ext
        allowed = jmask[None, :] & (j[None, :] <= ti[:, None])
        if TREE:
            tm = tl.load(TreeMask + b * stride_tb + ti[:, None] * stride_ti + j[None, :],
                         mask=rvalid[:, None] & jmask[None, :], other=0)
            allowed = allowed & (tm != 0)
        m_i, l_i, acc = latent_block(qc, qr, m_i, l_i, acc, KNew, row0 + j, stride_knt, jmask, allowed, dv, dr,
                                     scale_log2, DV, DR, Q.dtype.element_ty, DOT_F32, DOT_PREC)

    pdl_release_late(PDL)
    store_rows(Out, MidO, MidLse, qrow, head, split, dv, rvalid, m_i, l_i, acc, stride_ot, stride_oh, stride_mt,
               stride_mh, stride_ms, stride_lt, stride_lh, DV, DIRECT)


def mla_extend_attention(
    q: torch.Tensor,
    k_new: torch.Tensor,
    k_pool: torch.Tensor,
    out: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    ext_lens: torch.Tensor,
    ext_start: torch.Tensor,
    tree_mask: torch.Tensor | None,
    mid_o: torch.Tensor,
    mid_lse: torch.Tensor,
    max_ext: int,
    num_splits: int,
    scale: float,
    cfg: TileConfig,
    dot_f32: bool,
) -> None:
    """``q`` [T, H, DV + DR], ``k_new`` [T, 1, DV + DR] (packed request-major), ``k_pool``
    [slots, 1, DV + DR], ``out`` [T, H, DV].

    ``max_ext`` bounds ``ext_lens`` (it sizes the grid); ``tree_mask`` is [B, s, s] uint8 over the
    new block (or None). ``mid_o`` [T, H, num_splits, DV] / ``mid_lse`` [T, H, num_splits] are
    fp32 scratch, unused when ``num_splits == 1``.
    """
    num_tokens, num_heads, dim = q.shape
    bsz = ext_lens.shape[0]
    if num_tokens == 0 or bsz == 0:
        return
    dv = out.shape[-1]
    for name, x in (("q", q), ("k_new", k_new), ("k_pool", k_pool), ("out", out)):
        assert x.stride(-1) == 1, f"{name} must have a contiguous last dim"
    assert k_new.shape[1:] == k_pool.shape[1:] == (1, dim), f"latent rows {tuple(k_new.shape)} / {tuple(k_pool.shape)}"
    direct = num_splits == 1
    if not direct:
        assert mid_o.shape == (num_tokens, num_heads, num_splits, dv), f"mid_o {tuple(mid_o.shape)}"
    tm = tree_mask if tree_mask is not None else ext_lens  # placeholder pointer, never read
    tb, ti = (tree_mask.stride(0), tree_mask.stride(1)) if tree_mask is not None else (0, 0)
    log2e = 1.4426950408889634
    grid = (grid_rows(max_ext, num_heads, cfg.block_rows), bsz, num_splits)
    _mla_extend_kernel[grid](
        q, k_new, k_pool, out, mid_o, mid_lse, req_to_token, req_pool_indices, seq_lens, ext_lens, ext_start, tm,
        q.stride(0), q.stride(1), k_new.stride(0), k_pool.stride(0), req_to_token.stride(0), out.stride(0),
        out.stride(1), mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1), tb,
        ti, scale * log2e, num_splits,
        NUM_HEADS=num_heads, BLOCK_M=cfg.block_rows, BLOCK_N=cfg.block_n, MIN_SPLIT=cfg.min_split,
        TREE=tree_mask is not None, DIRECT=direct, **latent_consts(dv, dim, q.dtype, dot_f32),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_opts(q.device, "attention", late=True),
    )
    if not direct:
        merge_splits(mid_o, mid_lse, out)

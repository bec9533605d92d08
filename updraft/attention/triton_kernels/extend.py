"""Extend attention: new tokens over a cached prefix (EXTEND, DRAFT_EXTEND v1/v2, TARGET_VERIFY).

Request ``b`` has ``kv_lens[b]`` prefix positions in the pool (read through ``req_to_token``)
and ``ext_lens[b]`` new tokens whose K/V are passed as tensors (rows
``ext_start[b] .. ext_start[b] + ext_lens[b]``), like production engines do: the kernel never
reads this forward's own tokens from the pool, so it is correct whether or not they were stored.
New token ``i`` sees every prefix position and new tokens ``j <= i`` (causal in the block),
further restricted by ``tree_mask[b, i, j]`` when ``TREE``. The kernel takes ``seq_lens`` (the
batch's own, prefix + new) and derives ``kv_lens = max(seq_lens - ext_lens, 0)`` itself: padded
graph rows (seq_lens = 1, ext = stride) have no prefix and attend only inside their own (scratch)
block. (The clamp is here, not in a metadata launch: see ``TritonBackend._alloc_metadata``.)

Grid: ``(cdiv(max_ext, BLOCK_T), B, num_splits * num_kv_heads)``, heavy programs first (see the
kernel). GQA: a tile's rows are ``BLOCK_T`` tokens x ``GROUP_PAD`` query heads of one KV head
(row ``r`` = token ``r // GROUP_PAD``, head ``r % GROUP_PAD``), so K/V blocks are loaded once for
the whole group and the M dimension of the dot is filled even when a request has few new tokens
(a verify block of 4 tokens x 4 heads is a 16-row tile).

Splits: for few query tiles over a long prefix (verify, V2, short chunks) the prefix is split
across ``num_splits`` programs (split length derived on device from ``kv_lens[b]``, as in the
decode kernel); the last split also covers the new tokens; partials are merged by ``merge``.
``num_splits == 1`` (prefill) writes the output directly, and so does the last split of a request
with no cached prefix (its only split with keys; a prefill graph is captured with splits before
its prompts' prefixes are known), marking its rows' lse +inf for the merge to leave them.
``max_ext`` (grid), ``num_splits`` and the tile config are host scalars, frozen at graph capture.

Masks cost a prefill: key blocks every row of the tile sees in full (the prefix's whole blocks,
the new tokens' blocks before the tile's first token, with no tree mask) take loops without the
position mask, the -inf guard or masked loads; the prefix's tail block and the causal diagonal
keep them (H200, 8B heads, bs 1 x 4k: 493 -> 417 us at the same tile).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.attention.triton_kernels import TileConfig, dot_precision, next_pow2
from updraft.attention.triton_kernels.merge import merge_splits
from updraft.attention.triton_kernels.slots import split_len
from updraft.ops.triton_utils import pdl_enter, pdl_opts, pdl_release_late


@triton.jit
def _attend_block(
    q, k, v, allowed, m_i, l_i, acc, scale_log2, PV_DTYPE: tl.constexpr, DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr,
    MASKED: tl.constexpr = True,
):
    """One online-softmax step. ``k`` is [D, N] (already transposed), ``v`` [N, D].

    ``MASKED``: ``allowed`` applies, and rows that have seen no allowed key yet stay safe (m
    stays -inf, weights 0: a tree mask or a padded row can mask a whole block). Unmasked
    (``allowed`` ignored): every key of the block is allowed for every row, so each row's max
    is finite after it and the -inf guard is not needed.

    The scale multiplies the row max (``max(s * x) = s * max(x)`` for ``s > 0``, rounding
    included) and enters the exponent as ``qk * s - m`` (one FMA an element), and ``p @ v``
    accumulates into the rescaled ``acc`` inside the MMA (no separate add of the tile)."""
    qk = tl.dot(q, k, input_precision=DOT_PREC)
    if MASKED:
        qk = tl.where(allowed, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1) * scale_log2)
    if MASKED:
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_safe = m_new
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(qk * scale_log2 - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(PV_DTYPE)
    v = v.to(PV_DTYPE)
    if DOT_F32:
        p = p.to(tl.float32)
        v = v.to(tl.float32)
    acc = tl.dot(p, v, acc * alpha[:, None], input_precision=DOT_PREC)
    return m_new, l_i, acc


@triton.jit
def _load_kv(KBase, VBase, rows, stride_kr, stride_vr, d, dmask, rmask, MASKED: tl.constexpr = True,
             EVEN_D: tl.constexpr = False):
    """K as [D, N] (transposed for the dot) and V as [N, D] of ``rows`` (masked by ``rmask``
    when ``MASKED``, by ``dmask`` unless ``EVEN_D``: the head dim fills the tile); the bases
    already point at the KV head."""
    kp = KBase + rows[None, :] * stride_kr + d[:, None]
    vp = VBase + rows[:, None] * stride_vr + d[None, :]
    if MASKED:
        k = tl.load(kp, mask=dmask[:, None] & rmask[None, :], other=0.0)
        v = tl.load(vp, mask=rmask[:, None] & dmask[None, :], other=0.0)
    elif EVEN_D:
        k = tl.load(kp)
        v = tl.load(vp)
    else:
        k = tl.load(kp, mask=dmask[:, None], other=0.0)
        v = tl.load(vp, mask=dmask[None, :], other=0.0)
    return k, v


@triton.jit
def _store_rows(Out, MidO, MidLse, qrow, heads, split, d, omask, rvalid, m_i, l_i, acc, own, stride_ot, stride_oh,
                stride_mt, stride_mh, stride_ms, stride_lt, stride_lh, DIRECT: tl.constexpr):
    """The normalised output rows (DIRECT), or this split's partial output and log-sum-exp. A split
    that ``own``s its request's rows (it saw every key: no cached prefix) writes the output too and
    marks them done with lse +inf. Both stores are masked, not branched: one epilogue, so the
    registers stay the partial store's (a branch per store spilled the 8B prefill tile)."""
    has_keys = l_i > 0.0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    out_ptrs = Out + qrow[:, None] * stride_ot + heads[:, None] * stride_oh + d[None, :]
    if DIRECT:
        tl.store(out_ptrs, out.to(Out.dtype.element_ty), mask=omask)
    else:  # rows without keys store lse -inf only: the merge never loads their partial
        # (a where: the interpreter refuses mask & scalar)
        tl.store(out_ptrs, out.to(Out.dtype.element_ty), mask=tl.where(own, omask, False))
        tl.store(MidO + qrow[:, None] * stride_mt + heads[:, None] * stride_mh + split * stride_ms + d[None, :], out,
                 mask=tl.where(own, False, omask & has_keys[:, None]))
        lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        lse = tl.where(own, float("inf"), lse)
        tl.store(MidLse + qrow * stride_lt + heads * stride_lh + split, lse, mask=rvalid)


@triton.jit
def _attend_prefix(q, m_i, l_i, acc, KBase, VBase, table_row, lo, hi, stride_ks, stride_vs, d, dmask, scale_log2,
                   PV_DTYPE: tl.constexpr, DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr, BLOCK_N: tl.constexpr,
                   EVEN_D: tl.constexpr):
    """The cached positions ``lo .. hi`` (pool slots from ``table_row``), seen by every query row. Whole
    blocks take no key mask, no -inf guard and no masked loads; the tail block keeps them."""
    whole = lo + (hi - lo) // BLOCK_N * BLOCK_N
    for start in range(lo, whole, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        slot = tl.load(table_row + pos).to(tl.int64)
        k, v = _load_kv(KBase, VBase, slot, stride_ks, stride_vs, d, dmask, dmask, False, EVEN_D)
        m_i, l_i, acc = _attend_block(q, k.to(q.dtype), v, None, m_i, l_i, acc, scale_log2, PV_DTYPE, DOT_F32, DOT_PREC,
                                      False)
    for start in range(whole, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        pmask = pos < hi
        slot = tl.load(table_row + pos, mask=pmask, other=0).to(tl.int64)
        k, v = _load_kv(KBase, VBase, slot, stride_ks, stride_vs, d, dmask, pmask)
        m_i, l_i, acc = _attend_block(q, k.to(q.dtype), v, pmask[None, :], m_i, l_i, acc, scale_log2, PV_DTYPE, DOT_F32,
                                      DOT_PREC)
    return m_i, l_i, acc


@triton.jit
def _attend_new(q, m_i, l_i, acc, KBase, VBase, TreeRow, row0, t0, ti, rvalid, ext, on, stride_knt, stride_vnt,
                stride_ti, d, dmask, scale_log2, PV_DTYPE: tl.constexpr, DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, EVEN_D: tl.constexpr, TREE: tl.constexpr):
    """The request's new tokens (rows ``row0 ..`` of the K/V tensors) when ``on``, causal for the tile's
    tokens ``ti`` (from ``t0``): blocks wholly before the tile's first token are seen by every row (no
    tree mask: a tree is masked everywhere); the blocks from there to the tile's last token take the
    causal mask, and ``TreeRow``'s (the request's tree mask) when ``TREE``."""
    j_end = tl.where(on, tl.minimum(ext, t0 + BLOCK_T), 0)
    j_full = 0
    if not TREE:
        j_full = tl.where(on, t0 // BLOCK_N * BLOCK_N, 0)
    for j0 in range(0, j_full, BLOCK_N):
        j = j0 + tl.arange(0, BLOCK_N)
        k, v = _load_kv(KBase, VBase, row0 + j, stride_knt, stride_vnt, d, dmask, dmask, False, EVEN_D)
        m_i, l_i, acc = _attend_block(q, k.to(q.dtype), v, None, m_i, l_i, acc, scale_log2, PV_DTYPE, DOT_F32, DOT_PREC,
                                      False)
    for j0 in range(j_full, j_end, BLOCK_N):
        j = j0 + tl.arange(0, BLOCK_N)
        jmask = j < ext
        k, v = _load_kv(KBase, VBase, row0 + j, stride_knt, stride_vnt, d, dmask, jmask)
        allowed = jmask[None, :] & (j[None, :] <= ti[:, None])
        if TREE:
            tm = tl.load(TreeRow + ti[:, None] * stride_ti + j[None, :], mask=rvalid[:, None] & jmask[None, :], other=0)
            allowed = allowed & (tm != 0)
        m_i, l_i, acc = _attend_block(q, k.to(q.dtype), v, allowed, m_i, l_i, acc, scale_log2, PV_DTYPE, DOT_F32,
                                      DOT_PREC)
    return m_i, l_i, acc


@triton.jit
def _extend_kernel(
    Q, KNew, VNew, KPool, VPool, Out, MidO, MidLse, ReqToToken, ReqPoolIdx, SeqLens, ExtLens, ExtStart, TreeMask,
    stride_qt, stride_qh, stride_knt, stride_knh, stride_vnt, stride_vnh, stride_ks, stride_kh, stride_vs, stride_vh,
    stride_rt, stride_ot, stride_oh, stride_mt, stride_mh, stride_ms, stride_lt, stride_lh, stride_tb, stride_ti,
    scale_log2, num_splits,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_T: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MIN_SPLIT: tl.constexpr, TREE: tl.constexpr, DIRECT: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr, PDL: tl.constexpr, EVEN_D: tl.constexpr = False,
    STRIDE: tl.constexpr = 0,
):
    pdl_enter(PDL)
    # Heavy programs first (the scheduler takes them in launch order, axis 0 fastest): each
    # request's last tiles (most causal keys) first, and the last split (the new tokens: every key
    # of a request without a prefix) of every KV head on the slowest axis before the prefix
    # splits, so a prefill graph's empty splits fill in after the work. One split (DIRECT): split
    # 0 as a constant, or the compiler keeps the prefix loop's bounds live. (The tile index on the
    # slowest axis, heaviest first over all heads, was 13-24% faster at some prefills and 7-14%
    # slower at others, with worse code: 2026-12-02-h200-prefill-direct/lpt-grid.patch.)
    tile = tl.num_programs(0) - 1 - tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    if DIRECT:
        split = 0
        kvh = tl.program_id(2).to(tl.int64)
    else:
        num_kv_heads = tl.num_programs(2) // num_splits
        kvh = (tl.program_id(2) % num_kv_heads).to(tl.int64)
        split = num_splits - 1 - tl.program_id(2) // num_kv_heads

    ext = tl.load(ExtLens + b)
    kv = tl.maximum(tl.load(SeqLens + b) - ext, 0)  # the prefix (0 in padded rows: seq 1 < ext)
    if STRIDE > 0:  # fixed stride: the rows from the frozen stride, as the decode kernel's (failure class 1)
        row0 = b * STRIDE
    else:
        row0 = tl.load(ExtStart + b).to(tl.int64)
    rpi = tl.load(ReqPoolIdx + b).to(tl.int64)
    t0 = tile * BLOCK_T
    live = t0 < ext  # tiles past this request's tokens do nothing (grid is sized by max_ext)

    r = tl.arange(0, ROWS)
    ti = t0 + r // GROUP_PAD
    hr = r % GROUP_PAD
    rvalid = (ti < ext) & (hr < GROUP)
    heads = kvh * GROUP + hr
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    qrow = row0 + ti
    q = tl.load(Q + qrow[:, None] * stride_qt + heads[:, None] * stride_qh + d[None, :],
                mask=rvalid[:, None] & dmask[None, :], other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)

    m_i = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, BLOCK_D], tl.float32)

    # Phase 1: this split's share of the cached prefix, from the pool. Every query row sees it.
    span = split_len(kv, num_splits, BLOCK_N, MIN_SPLIT)
    lo = split * span
    hi = tl.maximum(tl.minimum(lo + span, kv), lo)  # trailing splits past the prefix: empty
    hi = tl.where(live, hi, lo)
    m_i, l_i, acc = _attend_prefix(
        q, m_i, l_i, acc, KPool + kvh * stride_kh, VPool + kvh * stride_vh, ReqToToken + rpi * stride_rt, lo, hi,
        stride_ks, stride_vs, d, dmask, scale_log2, Q.dtype.element_ty, DOT_F32, DOT_PREC, BLOCK_N, EVEN_D)

    # Phase 2 (last split only): the new tokens, causal, from the K/V tensors.
    on = live & (split == num_splits - 1)
    m_i, l_i, acc = _attend_new(
        q, m_i, l_i, acc, KNew + kvh * stride_knh, VNew + kvh * stride_vnh, TreeMask + b * stride_tb, row0, t0, ti,
        rvalid, ext, on, stride_knt, stride_vnt, stride_ti, d, dmask, scale_log2, Q.dtype.element_ty, DOT_F32, DOT_PREC,
        BLOCK_N, BLOCK_T, EVEN_D, TREE)

    pdl_release_late(PDL)
    # No cached prefix: every key of the request is in the last split (the prefix splits are empty),
    # which writes the output itself and marks its rows done for the merge to leave.
    own = (kv == 0) & (split == num_splits - 1)
    wvalid = rvalid
    if STRIDE > 0:
        # Every row of the request's block is written, so the output needs no memset: a row past
        # ``ext`` (zero-length metadata only: failure class 8) as one without keys (0 / lse -inf).
        wvalid = (ti < STRIDE) & (hr < GROUP)
        l_i = tl.where(rvalid, l_i, 0.0)
        acc = tl.where(rvalid[:, None], acc, 0.0)
    _store_rows(Out, MidO, MidLse, qrow, heads, split, d, wvalid[:, None] & dmask[None, :], wvalid, m_i, l_i, acc, own,
                stride_ot, stride_oh, stride_mt, stride_mh, stride_ms, stride_lt, stride_lh, DIRECT)


def tokens_per_tile(block_rows: int, group: int) -> int:
    """``BLOCK_T``: tokens per tile when a tile holds ``block_rows`` rows of ``next_pow2(group)``
    head rows each (at least one token; at least 16 rows, the smallest dot tile)."""
    group_pad = next_pow2(group)
    return max(block_rows, group_pad, 16) // group_pad


def _two_strides(x: torch.Tensor) -> tuple[int, int]:
    return x.stride(0), x.stride(1)


def extend_attention(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
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
    stride: int = 0,
    merge_max_programs: int = 0,
) -> None:
    """``q``/``out`` [T, H, D], ``k_new``/``v_new`` [T, Hkv, D] packed request-major.
    ``merge_max_programs``: the split merge's grid cap on PDL (``merge_splits(max_programs=)``).

    ``max_ext`` bounds ``ext_lens`` (it sizes the grid); ``tree_mask`` is [B, s, s] uint8 over
    the new block (or None). ``mid_o`` [T, H, num_splits, D] / ``mid_lse`` [T, H, num_splits]
    are fp32 scratch, unused when ``num_splits == 1``. ``stride`` > 0 (a fixed-stride mode,
    ``max_ext == stride``): request ``b``'s rows are ``b * stride ..`` whatever ``ext_start``
    holds, and all ``T = B * stride`` output rows are written (rows past ``ext_lens[b]``, which
    only zero-length metadata has, as rows without keys); 0: only the rows ``ext_start`` /
    ``ext_lens`` cover.
    """
    num_tokens, num_heads, dim = q.shape
    bsz = ext_lens.shape[0]
    hkv = k_pool.shape[1]
    if num_tokens == 0 or bsz == 0:
        return
    for name, x in (("q", q), ("k_new", k_new), ("v_new", v_new), ("k_pool", k_pool), ("v_pool", v_pool)):
        assert x.stride(-1) == 1, f"{name} must have a contiguous last dim"
    group = num_heads // hkv
    group_pad = next_pow2(group)
    block_t = tokens_per_tile(cfg.block_rows, group)
    direct = num_splits == 1
    if not direct:
        assert mid_o.shape == (num_tokens, num_heads, num_splits, dim), f"mid_o {tuple(mid_o.shape)}"
    assert stride == 0 or (max_ext == stride and num_tokens == bsz * stride), "fixed stride: stride rows a request"
    tree = tree_mask is not None
    tm = tree_mask if tree_mask is not None else ext_lens  # placeholder pointer, never read
    stride_tb = tree_mask.stride(0) if tree_mask is not None else 0
    stride_ti = tree_mask.stride(1) if tree_mask is not None else 0
    log2e = 1.4426950408889634
    block_d = max(16, next_pow2(dim))
    grid = (triton.cdiv(max_ext, block_t), bsz, num_splits * hkv)
    _extend_kernel[grid](
        q, k_new, v_new, k_pool, v_pool, out, mid_o, mid_lse, req_to_token, req_pool_indices, seq_lens,
        ext_lens, ext_start, tm,
        *_two_strides(q), *_two_strides(k_new), *_two_strides(v_new), *_two_strides(k_pool), *_two_strides(v_pool),
        req_to_token.stride(0), *_two_strides(out), *_two_strides(mid_o), mid_o.stride(2), *_two_strides(mid_lse),
        stride_tb, stride_ti, scale * log2e, num_splits,
        GROUP=group, GROUP_PAD=group_pad, BLOCK_T=block_t, ROWS=block_t * group_pad, BLOCK_N=cfg.block_n,
        HEAD_DIM=dim, BLOCK_D=block_d, MIN_SPLIT=cfg.min_split, TREE=tree, DIRECT=direct,
        DOT_F32=dot_f32, DOT_PREC=dot_precision(q.dtype, dot_f32), EVEN_D=dim == block_d, STRIDE=stride,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages, **pdl_opts(q.device, "attention", late=True),
    )
    if not direct:
        merge_splits(mid_o, mid_lse, out, max_programs=merge_max_programs)

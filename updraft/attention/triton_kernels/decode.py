"""Split-KV flash-decoding: the query rows of each request over its whole cache (DECODE,
DRAFT_DECODE: one row; TARGET_VERIFY: a chain's ``STRIDE`` rows, causal inside the block).

Grid: ``(B, num_kv_heads, num_splits)``. A program serves request ``b``, KV head ``g`` and split
``s``: its tile holds the ``STRIDE x GROUP`` query rows (token ``i``, head ``g * GROUP + j``,
``GROUP = num_heads / num_kv_heads``) that share KV head ``g`` (padded to ``BLOCK_H >= 16`` rows,
the smallest ``tl.dot`` tile), so every K/V row is loaded once per group and verify block, not
once per query head and token. Request ``b``'s tokens are rows ``b * STRIDE + i`` of ``q``, from
the frozen stride (a constexpr, never a start offset: capture and replay cannot lay them out
differently); token ``i`` sits at position ``kv + i`` with ``kv = max(seq_lens[b] - STRIDE, 0)``
and sees positions ``<= kv + i``. A verify with a tree mask takes the extend kernel.

Splits: ``num_splits`` is a host scalar (frozen at graph capture); the split LENGTH is derived on
device from ``seq_lens[b]``: ``max(round_up(cdiv(seq, num_splits), BLOCK_N), MIN_SPLIT)``. So
one captured value serves every context length; short requests leave trailing splits empty
(they store ``lse = -inf`` and the merge skips them). With one split the kernel normalises and
writes the output directly (``DIRECT``); otherwise it writes fp32 partials, merged either by
``merge`` (a second launch) or, with ``MERGE``, in the same launch: only the ``n_live =
cdiv(seq, split length)`` splits that hold keys take part (the others return at once); a lone
live split writes the output itself, several take an atomic ticket per (request, KV head) and the
last to finish merges them (the counters start and end at 0). A larger ``MIN_SPLIT`` leaves
short contexts one or two live splits (``TritonBackend.decode_min_split``).

Pipelining: tiles with ``num_stages >= 3`` load the next block's slots a block ahead
(``PREFETCH``), so the K/V tiles are double-buffered (``slots.py`` says why it takes that).

Keys are read through ``req_to_token`` one position at a time, so any page size works. The new
token must already be in the pool (the backend stores K/V first): the kernel reads positions
``[0, seq_lens[b])`` from the pool and nothing else. Padded graph rows (``seq_lens = 1``,
``req_pool_indices = 0``) read ``req_to_token[0, 0] = 0``: the scratch slot.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.attention.triton_kernels import TileConfig, dot_precision, next_pow2
from updraft.attention.triton_kernels.merge import merge_splits
from updraft.attention.triton_kernels.slots import (
    block_slots,
    first_slots,
    prefetch_rows,
    prewarm_slots,
    split_len,
)
from updraft.ops.triton_utils import Family, pdl_enter, pdl_opts, pdl_release_late


@triton.jit
def _decode_block(q, m_i, l_i, acc, pos, pmask, slot, last, KPool, VPool, kvh, d, dmask, stride_ks, stride_kh,
                  stride_vs, stride_vh, scale_log2, out_ty, DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr,
                  CAUSAL: tl.constexpr):
    """One block of BLOCK_N cached positions ``pos`` (``pmask``: those before the split's end;
    ``pos[0]`` always is) in pool slots ``slot``: the online-softmax update of (m, l, acc).
    ``CAUSAL``: row r sees positions ``<= last[r]`` only (a row may then see none of the block,
    nor any before it: its max stays -inf and adds nothing)."""
    k = tl.load(KPool + slot[None, :] * stride_ks + kvh * stride_kh + d[:, None], mask=dmask[:, None] & pmask[None, :],
                other=0.0)
    qk = tl.dot(q, k.to(q.dtype), input_precision=DOT_PREC) * scale_log2
    if CAUSAL:
        qk = tl.where(pmask[None, :] & (pos[None, :] <= last[:, None]), qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # exp2(-inf - 0) = 0, never NaN
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(qk - m_safe[:, None])
    else:
        qk = tl.where(pmask[None, :], qk, float("-inf"))
        # Position ``start`` is always valid here (start < hi), so m_new is finite.
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(VPool + slot[:, None] * stride_vs + kvh * stride_vh + d[None, :], mask=pmask[:, None] & dmask[None, :],
                other=0.0)
    # P is rounded to the query dtype before the PV product (tensor cores on bf16/fp16).
    p = p.to(out_ty)
    v = v.to(out_ty)
    if DOT_F32:
        p = p.to(tl.float32)
        v = v.to(tl.float32)
    return m_new, l_i, acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PREC)


@triton.jit
def _merge_rows(MidO, MidLse, Out, qrow, heads, hmask, d, dmask, n_live, stride_mt, stride_mh, stride_ms, stride_lt,
                stride_lh, stride_ot, stride_oh, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    """The split merge of ``merge.py`` for this program's rows (the STRIDE x GROUP query rows of a
    request and KV head), run by the last of their live split programs: ``sum_s 2^(lse_s - max) o_s
    / sum_s 2^(lse_s - max)`` over the ``n_live`` splits that hold keys (every one was written by
    this launch; a row's lse is -inf where the split held none of ITS keys: weight 0), all rows at
    once, ``CH`` splits per step as one [rows, CH, D] load (so a short context's few live splits
    cost one round trip to L2, not one each); a row with no keys at all gets 0. Looping over rows
    instead (one [splits, D] tile each) cost ~15 us per layer for a 6-token verify block on the H100."""
    CH: tl.constexpr = max(1, 8192 // (BLOCK_H * BLOCK_D))  # [rows, CH, D] fp32 values: 64 a thread on 4 warps
    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    den = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    c = tl.arange(0, CH)
    for s0 in range(0, n_live, CH):
        sp = s0 + c
        lmask = hmask[:, None] & (sp < n_live)[None, :]
        # .cg: the other programs' partials are in L2; never serve them from a stale L1 line
        lse = tl.load(MidLse + qrow[:, None] * stride_lt + heads[:, None] * stride_lh + sp[None, :], mask=lmask,
                      other=float("-inf"), cache_modifier=".cg")
        o = tl.load(MidO + qrow[:, None, None] * stride_mt + heads[:, None, None] * stride_mh
                    + sp[None, :, None] * stride_ms + d[None, None, :],
                    mask=lmask[:, :, None] & dmask[None, None, :], other=0.0, cache_modifier=".cg")
        m_new = tl.maximum(m, tl.max(lse, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        w = tl.exp2(lse - m_safe[:, None])
        acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * o, 1)
        den = den * alpha + tl.sum(w, 1)
        m = m_new
    out = acc / tl.where(den == 0.0, 1.0, den)[:, None]
    tl.store(Out + qrow[:, None] * stride_ot + heads[:, None] * stride_oh + d[None, :], out.to(Out.dtype.element_ty),
             mask=hmask[:, None] & dmask[None, :])


@triton.jit
def _decode_kernel(
    Q, KPool, VPool, Out, MidO, MidLse, Sem, ReqToToken, ReqPoolIdx, SeqLens,
    stride_qt, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_rt, stride_ot, stride_oh,
    stride_mt, stride_mh, stride_ms, stride_lt, stride_lh, scale_log2, num_splits,
    GROUP: tl.constexpr, STRIDE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, MIN_SPLIT: tl.constexpr, DIRECT: tl.constexpr, DOT_F32: tl.constexpr,
    DOT_PREC: tl.constexpr, MERGE: tl.constexpr, PREFETCH: tl.constexpr, PREWARM: tl.constexpr,
    LINE: tl.constexpr, PDL: tl.constexpr, SKIP_EMPTY: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    if PREWARM:  # this split's first cached K and V rows into L2 before the wait (slots.py)
        slot0, ok0 = prewarm_slots(SeqLens, ReqPoolIdx, ReqToToken, b, split, num_splits, stride_rt, STRIDE, BLOCK_N,
                                   MIN_SPLIT)
        prefetch_rows(KPool + kvh * stride_kh, slot0, ok0, stride_ks, HEAD_DIM, LINE)
        prefetch_rows(VPool + kvh * stride_vh, slot0, ok0, stride_vs, HEAD_DIM, LINE)
    pdl_enter(PDL)

    seq = tl.load(SeqLens + b)
    rpi = tl.load(ReqPoolIdx + b).to(tl.int64)
    span = split_len(seq, num_splits, BLOCK_N, MIN_SPLIT)
    lo = split * span
    hi = tl.minimum(lo + span, seq)

    rr = tl.arange(0, BLOCK_H)
    ti = rr // GROUP  # the row's token in the verify block (0 in decode)
    hmask = ti < STRIDE
    heads = kvh * GROUP + rr % GROUP
    qrow = b * STRIDE + ti
    n_live = tl.maximum(tl.cdiv(seq, span), 1)  # splits holding keys (split 0 always counts)
    if (split >= n_live) & SKIP_EMPTY:  # a split past the context
        if not MERGE:  # only its lse (-inf: the merge launch skips it); the in-kernel merge never reads it
            tl.store(MidLse + qrow * stride_lt + heads * stride_lh + split,
                     tl.full([BLOCK_H], float("-inf"), tl.float32), mask=hmask)
    else:
        last = tl.maximum(seq - STRIDE, 0) + ti  # the last position row rr may see
        d = tl.arange(0, BLOCK_D)
        dmask = d < HEAD_DIM
        q = tl.load(Q + qrow[:, None] * stride_qt + heads[:, None] * stride_qh + d[None, :],
                    mask=hmask[:, None] & dmask[None, :], other=0.0)
        if DOT_F32:
            q = q.to(tl.float32)

        m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
        table_row = ReqToToken + rpi * stride_rt
        slot_next = first_slots(table_row, lo, hi, BLOCK_N, PREFETCH)
        for start in range(lo, hi, BLOCK_N):
            pos = start + tl.arange(0, BLOCK_N)
            pmask = pos < hi
            slot, slot_next = block_slots(table_row, pos, hi, slot_next, BLOCK_N, PREFETCH)
            m_i, l_i, acc = _decode_block(q, m_i, l_i, acc, pos, pmask, slot, last, KPool, VPool, kvh, d, dmask,
                                          stride_ks, stride_kh, stride_vs, stride_vh, scale_log2, Q.dtype.element_ty,
                                          DOT_F32, DOT_PREC, STRIDE > 1)

        pdl_release_late(PDL)
        has_keys = l_i > 0.0
        out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
        omask = hmask[:, None] & dmask[None, :]
        out_ptrs = Out + qrow[:, None] * stride_ot + heads[:, None] * stride_oh + d[None, :]
        if DIRECT:
            tl.store(out_ptrs, out.to(Out.dtype.element_ty), mask=omask)
        elif (n_live == 1) & MERGE:  # the only split with keys: its rows are final, no ticket
            tl.store(out_ptrs, out.to(Out.dtype.element_ty), mask=omask)
        else:
            tl.store(MidO + qrow[:, None] * stride_mt + heads[:, None] * stride_mh + split * stride_ms + d[None, :], out,
                     mask=omask)
            lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
            tl.store(MidLse + qrow * stride_lt + heads * stride_lh + split, lse, mask=hmask)
            if MERGE:  # the last live split of (b, kvh) to finish merges them all: no second launch
                tl.debug_barrier()  # every thread's partial stored before the ticket releases them
                counter = Sem + b * tl.num_programs(1) + kvh
                if tl.atomic_add(counter, 1, sem="acq_rel") == n_live - 1:
                    _merge_rows(MidO, MidLse, Out, qrow, heads, hmask, d, dmask, n_live, stride_mt,
                                stride_mh, stride_ms, stride_lt, stride_lh, stride_ot, stride_oh, BLOCK_H, BLOCK_D)
                    tl.atomic_xchg(counter, 0)  # ready for the next layer / replay (stream order)


def decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    out: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    mid_o: torch.Tensor,
    mid_lse: torch.Tensor,
    num_splits: int,
    scale: float,
    cfg: TileConfig,
    dot_f32: bool,
    sem: torch.Tensor | None = None,
    stride: int = 1,
    pdl: bool = True,
    prewarm: bool = True,
    merge_pdl: bool | None = None,
    skip_empty: bool = False,
    merge: bool = True,
    merge_max_programs: int = 0,
) -> None:
    """``stride`` query rows per request: ``q``/``out`` [B * stride, H, D] (request-major); keys
    ``[0, seq_lens[b])`` from the pool, token ``i`` of the block causal at ``seq_lens[b] - stride + i``.

    ``mid_o`` [T, H, num_splits, D] and ``mid_lse`` [T, H, num_splits] (fp32) are scratch for the
    split partials (unused when ``num_splits == 1``). ``num_splits`` and ``cfg`` are host scalars:
    under a CUDA graph they are the values seen at capture. ``sem``: int32 [B * num_kv_heads]
    counters at 0: the splits are merged in the same launch (a lone live split writes the output,
    else the last live split program of each request and KV head merges and resets its counter;
    splits past the context return at once); None: a second launch (``merge_splits``) merges.
    ``pdl``: False launches both without PDL whatever the family allows (``TritonBackend``'s
    verify blocks of 41-64 rows); ``merge_pdl`` the merge launch's own (None: as ``pdl``).
    ``prewarm`` (with PDL only): each program prefetches its split's first block of cached K/V
    rows into L2 before its wait (``slots.py``). ``skip_empty`` (split partials merged by the
    second launch): a program whose split lies past its request's context stores only its
    rows' lse (-inf), not its q load, its zero partial or the rest of the body. ``merge`` False
    (with ``sem`` None and ``num_splits > 1``): no merge launch, ``out`` untouched; the caller
    merges ``mid_o`` / ``mid_lse`` itself (``gemv_merge``). ``merge_max_programs``: the merge
    launch's grid cap where it is on PDL (``merge_splits(max_programs=)``; 0: its tile rule alone).
    """
    num_tokens, num_heads, dim = q.shape
    hkv = k_pool.shape[1]
    bsz = seq_lens.shape[0]
    if num_tokens == 0 or bsz == 0:
        return
    assert req_pool_indices.shape[0] == bsz and num_tokens == bsz * stride, "decode: stride rows per request"
    assert q.stride(-1) == 1 and k_pool.stride(-1) == 1 and v_pool.stride(-1) == 1
    group = num_heads // hkv
    direct = num_splits == 1
    if not direct:
        assert mid_o.shape == (num_tokens, num_heads, num_splits, dim), f"mid_o {tuple(mid_o.shape)}"
    log2e = 1.4426950408889634
    family: Family = "attention" if stride == 1 else "verify_attention"
    pdl_kw = pdl_opts(q.device, family, late=True, allowed=pdl)
    _decode_kernel[(bsz, hkv, num_splits)](
        q, k_pool, v_pool, out, mid_o, mid_lse, sem if sem is not None else seq_lens, req_to_token, req_pool_indices,
        seq_lens, q.stride(0), q.stride(1), k_pool.stride(0), k_pool.stride(1), v_pool.stride(0), v_pool.stride(1),
        req_to_token.stride(0), out.stride(0), out.stride(1), mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
        mid_lse.stride(0), mid_lse.stride(1), scale * log2e, num_splits,
        GROUP=group, STRIDE=stride, HEAD_DIM=dim, BLOCK_H=max(16, next_pow2(stride * group)), BLOCK_N=cfg.block_n,
        BLOCK_D=max(16, next_pow2(dim)), MIN_SPLIT=cfg.min_split, DIRECT=direct, DOT_F32=dot_f32,
        DOT_PREC=dot_precision(q.dtype, dot_f32), MERGE=sem is not None and not direct, PREFETCH=cfg.num_stages >= 3,
        PREWARM=prewarm and bool(pdl_kw["PDL"]), LINE=128 // k_pool.element_size(),
        SKIP_EMPTY=not direct and (skip_empty or sem is not None),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_kw,
    )
    if not direct and sem is None and merge:
        # every split wrote its partial (zeros past the context) unless skip_empty left them out
        merge_splits(mid_o, mid_lse, out, family, pdl if merge_pdl is None else merge_pdl, written=not skip_empty,
                     max_programs=merge_max_programs)

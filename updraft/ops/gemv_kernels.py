"""The Triton kernels of ``updraft.ops.gemv`` (small-M GEMMs with fused prologues and
epilogues). Their contract, tiles, numerics and hazards are described in ``gemv``'s docstring;
launch them through its functions (``linear``, ``linear_add_norm``, ``qkv_rope_store``,
``gate_up_silu``), which check the inputs and pick the launch configs."""

from __future__ import annotations

import triton
import triton.language as tl

from updraft.ops import rotary as rotary_kernels
from updraft.ops.activation import silu_mul
from updraft.ops.norm import normalise
from updraft.ops.triton_utils import pdl_enter, pdl_release_late, prefetch_l2, round_to


@triton.jit
def _rows(Ids, s_ids, M, stride_x, stride_r, BLOCK_M: tl.constexpr, GATHER: tl.constexpr):
    """This program's token rows ``m`` [BLOCK_M] (tile ``program_id(1)`` of the rows: the grid's
    second axis splits them, ``GemvConfig.m_tile``), their mask, and the offsets of their x and
    residual rows (``Ids`` read at stride ``s_ids``: a column of a [B, W] block of ids is a valid
    ``ids``)."""
    m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    mmask = m < M
    if GATHER:
        src = tl.load(Ids + m * s_ids, mask=mmask, other=0).to(tl.int64)
    else:
        src = m.to(tl.int64)
    return m, mmask, src * stride_x, src * stride_r


@triton.jit
def _input_chunk(X, xoff, Res, roff, k, msk, HAS_RES: tl.constexpr, RNE: tl.constexpr):
    """``[BLOCK_M, BLOCK_K]`` of x, or of ``round(x + residual)`` (the unfused ``x + residual``)."""
    x = tl.load(X + xoff[:, None] + k[None, :], mask=msk, other=0.0)
    if HAS_RES:
        r = tl.load(Res + roff[:, None] + k[None, :], mask=msk, other=0.0)
        x = round_to(x.to(tl.float32) + r.to(tl.float32), X.dtype.element_ty, RNE)
    return x


@triton.jit
def _prefetch_rows(W, wrow, wmask, stride_w, K, LINE: tl.constexpr):
    """L2 prefetch of the first K columns of this program's weight rows, one per 128-byte line:
    issued before ``pdl_enter``, the weight stream starts while the previous kernel finishes."""
    base = W + wrow[:, None] * stride_w
    for k0 in range(0, K, 8 * LINE):
        k = k0 + tl.arange(0, 8) * LINE
        prefetch_l2(tl.where(wmask[:, None] & (k < K)[None, :], base + k[None, :], W))


@triton.jit
def _partials(Sq, NSQ, m, mmask, BLOCK_S: tl.constexpr):
    """``[BLOCK_M, BLOCK_S]`` of the producer's ``NSQ`` partial sums of squares per row (``Sq``
    [M, NSQ], ``NormedRows.sumsq``). Loaded before the K loop and reduced after it
    (``_rstd_of``): the loads fly under the weight stream instead of delaying its start."""
    j = tl.arange(0, BLOCK_S)
    return tl.load(Sq + m[:, None] * NSQ + j[None, :], mask=mmask[:, None] & (j < NSQ)[None, :], other=0.0)


@triton.jit
def _rstd_of(part, K, eps):
    return tl.rsqrt(tl.sum(part, axis=1) / K + eps)


@triton.jit
def _prologue_stats(X, xoff, Res, roff, ResOut, m, mmask, K, eps, BLOCK_M: tl.constexpr,
                    BLOCK_K: tl.constexpr, HAS_RES: tl.constexpr, HAS_NORM: tl.constexpr,
                    WRITE_RES: tl.constexpr, RNE: tl.constexpr, TWO_PASS: tl.constexpr):
    """The two-pass prologue's first pass over the input rows: ``rstd`` [BLOCK_M] for the norm (1
    without one); the rows (after the residual add) written to ``ResOut`` [M, K] by program 0.
    One pass (not TWO_PASS): nothing to do here, 1 (the tile loop does both)."""
    sumsq = tl.zeros([BLOCK_M], tl.float32)
    if TWO_PASS and (HAS_NORM or WRITE_RES):
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            msk = mmask[:, None] & (k < K)[None, :]
            x = _input_chunk(X, xoff, Res, roff, k, msk, HAS_RES, RNE)
            if WRITE_RES:
                if tl.program_id(0) == 0:
                    tl.store(ResOut + m[:, None].to(tl.int64) * K + k[None, :], x, mask=msk)
            xf = x.to(tl.float32)
            sumsq += tl.sum(xf * xf, axis=1)  # masked lanes loaded 0
    if TWO_PASS and HAS_NORM:
        return tl.rsqrt(sumsq / K + eps)
    return tl.full([BLOCK_M], 1.0, tl.float32)


@triton.jit
def _gemv_tile(X, xoff, Res, roff, ResOut, NW, rstd, W, wrow, wmask, stride_w, m, mmask, K, eps,
               BLOCK_R: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, HAS_RES: tl.constexpr,
               HAS_NORM: tl.constexpr, WRITE_RES: tl.constexpr, DOT: tl.constexpr, DOT_F32: tl.constexpr,
               PREC: tl.constexpr, RNE: tl.constexpr, TWO_PASS: tl.constexpr):
    """``acc[r, m] = sum_k W[wrow[r], k] * a[m, k]`` in float32, ``a`` the prologue's rows. One
    pass: with a norm the sums are of ``x * norm_weight``, scaled by ``rstd`` at the end, and
    program 0 writes the rows after the residual add to ``ResOut`` [M, K] on the way. TWO_PASS:
    ``rstd`` (and ``ResOut``) came from ``_prologue_stats``; the normalised row is rounded, then
    its product with the norm weight, as ``ops.rmsnorm``."""
    acc = tl.zeros([BLOCK_R, BLOCK_M], tl.float32)
    sumsq = tl.zeros([BLOCK_M], tl.float32)
    wbase = W + wrow[:, None] * stride_w
    dt = X.dtype.element_ty
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask = k < K
        w = tl.load(wbase + k[None, :], mask=wmask[:, None] & kmask[None, :], other=0.0)
        if W.dtype.element_ty == tl.float8e4nv:  # FP8 rows (``linear``'s w_scale): exact in bf16 / f32
            w = w.to(dt)
        msk = mmask[:, None] & kmask[None, :]
        a = _input_chunk(X, xoff, Res, roff, k, msk, HAS_RES, RNE)
        if WRITE_RES and not TWO_PASS:
            if tl.program_id(0) == 0:
                tl.store(ResOut + m[:, None].to(tl.int64) * K + k[None, :], a, mask=msk)
        if HAS_NORM:
            af = a.to(tl.float32)
            nw = tl.load(NW + k, mask=kmask, other=0.0).to(tl.float32)
            if TWO_PASS:
                a = normalise(af, rstd[:, None], nw[None, :], dt, dt, RNE)
            else:
                sumsq += tl.sum(af * af, axis=1)  # masked lanes loaded 0
                a = round_to(af * nw[None, :], dt, RNE)
        acc = _product(w, a, acc, DOT, DOT_F32, PREC)
    if HAS_NORM and not TWO_PASS:
        acc = acc * tl.rsqrt(sumsq / K + eps)[None, :]
    return acc


@triton.jit
def _product(w, a, acc, DOT: tl.constexpr, DOT_F32: tl.constexpr, PREC: tl.constexpr):
    """``acc + w @ a.T`` (w [R, BLOCK_K], a [M, BLOCK_K]) on tensor cores (DOT) or FMA units."""
    if DOT:
        if DOT_F32:  # the interpreter's bf16 dot is wrong (see attention.triton_kernels)
            return tl.dot(w.to(tl.float32), tl.trans(a.to(tl.float32)), acc, input_precision=PREC)
        return tl.dot(w, tl.trans(a), acc, input_precision=PREC)
    return acc + tl.sum(w.to(tl.float32)[:, None, :] * a.to(tl.float32)[None, :, :], axis=2)


@triton.jit
def _normed_chunk(X, xoff, NW, k, kmask, msk, RNE: tl.constexpr):
    """One-pass norm input: (``round(x * norm_weight)`` chunk, its rows' sum of squares)."""
    x = tl.load(X + xoff[:, None] + k[None, :], mask=msk, other=0.0).to(tl.float32)
    nw = tl.load(NW + k, mask=kmask, other=0.0).to(tl.float32)
    return round_to(x * nw[None, :], X.dtype.element_ty, RNE), tl.sum(x * x, axis=1)  # masked lanes loaded 0


@triton.jit
def _dual_tile(X, xoff, NW, X2, x2off, NW2, W, wrow, wmask, stride_w, mmask, K, K2, eps, BLOCK_R: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, RNE: tl.constexpr):
    """EAGLE-3's QKV product on FMA tiles: weight columns [0, K) against ``norm(x)`` and [K, K + K2)
    against ``norm2(x2)``, in ONE K loop: each step issues both inputs' chunks and both weight
    chunks before any product, so the two streams' memory latencies overlap (two loops one after
    the other wait for each stream in turn; on a one-row launch that wait is the kernel's cost).
    Each input keeps its own one-pass sum of squares; the sums and roundings are those of two
    loops. Not for dot tiles: their software pipeline would stage both weight streams in shared
    memory (the 8B shape's 6-row tile then needs 242 KiB of the 227 an sm_90 SM has), and it already
    overlaps each loop's loads."""
    acc = tl.zeros([BLOCK_R, BLOCK_M], tl.float32)
    acc2 = tl.zeros([BLOCK_R, BLOCK_M], tl.float32)
    sumsq = tl.zeros([BLOCK_M], tl.float32)
    sumsq2 = tl.zeros([BLOCK_M], tl.float32)
    wbase = W + wrow[:, None] * stride_w
    for k0 in range(0, tl.maximum(K, K2), BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask, kmask2 = k < K, k < K2
        w = tl.load(wbase + k[None, :], mask=wmask[:, None] & kmask[None, :], other=0.0)
        w2 = tl.load(wbase + K + k[None, :], mask=wmask[:, None] & kmask2[None, :], other=0.0)
        a, s = _normed_chunk(X, xoff, NW, k, kmask, mmask[:, None] & kmask[None, :], RNE)
        a2, s2 = _normed_chunk(X2, x2off, NW2, k, kmask2, mmask[:, None] & kmask2[None, :], RNE)
        sumsq += s
        sumsq2 += s2
        acc = _product(w, a, acc, False, False, "ieee")
        acc2 = _product(w2, a2, acc2, False, False, "ieee")
    return acc * tl.rsqrt(sumsq / K + eps)[None, :] + acc2 * tl.rsqrt(sumsq2 / K2 + eps)[None, :]


@triton.jit
def _halves(acc, BLOCK_P: tl.constexpr, BLOCK_M: tl.constexpr):
    """``[2P, M]`` with rows interleaved (2p low, 2p + 1 high) -> (low, high), ``[P, M]`` each."""
    return tl.split(tl.permute(tl.reshape(acc, (BLOCK_P, 2, BLOCK_M)), (0, 2, 1)))


@triton.jit
def _argmax_partial(y, n, nmask, m, mmask, PMax, PIdx, pid, nprog, N):
    """This program's best column per token row (first index among ties; NaN counts as +inf,
    so a NaN row still yields a NaN's index, as torch's argmax)."""
    v = y.to(tl.float32)
    v = tl.where(v != v, float("inf"), v)
    v = tl.where(nmask[:, None], v, float("-inf"))
    best = tl.max(v, axis=0)
    idx = tl.min(tl.where(v == best[None, :], n[:, None], N), axis=0)
    tl.store(PMax + m * nprog + pid, best, mask=mmask)
    tl.store(PIdx + m * nprog + pid, idx, mask=mmask)


@triton.jit
def _argmax_finish(PMax, PIdx, Argmax, m, mmask, nprog, N, BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr):
    """The last program: every token row's argmax (``_argmax_reduce``) into ``Argmax`` [M] int64."""
    arg = _argmax_reduce(PMax, PIdx, m, mmask, nprog, N, BLOCK_M, BLOCK_P)
    tl.store(Argmax + m, arg.to(tl.int64), mask=mmask)


@triton.jit
def _argmax_reduce(PMax, PIdx, m, mmask, nprog, N, BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr):
    """Every program's (max, index) per token row reduced in program order (column order), so ties
    keep the first column: the best column [BLOCK_M] int32."""
    best = tl.full([BLOCK_M], float("-inf"), tl.float32)
    arg = tl.zeros([BLOCK_M], tl.int32)
    for p0 in range(0, nprog, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        msk = mmask[:, None] & (p < nprog)[None, :]
        off = m[:, None] * nprog + p[None, :]
        # .cg: read from L2, where the other programs' stores landed (not a stale L1 line)
        v = tl.load(PMax + off, mask=msk, other=float("-inf"), cache_modifier=".cg")
        i = tl.load(PIdx + off, mask=msk, other=N, cache_modifier=".cg")
        cb = tl.max(v, axis=1)
        ci = tl.min(tl.where(v == cb[:, None], i, N), axis=1)
        take = cb > best
        arg = tl.where(take, ci, arg)
        best = tl.maximum(best, cb)
    return arg


@triton.jit
def _add_norm_epilogue(y, ERes, ENW, EU, ESq, n, nmask, m, mmask, pid, nprog, stride_er, stride_u,
                       dt: tl.constexpr, RNE: tl.constexpr):
    """``linear_add_norm``'s epilogue on this program's ``[BLOCK_N, BLOCK_M]`` tile of the rounded
    GEMM output ``y``: returns the new residual stream ``s = round(y + residual)`` (what the next
    prologue's add computed), stores ``round(s * norm_weight)`` to ``EU`` and the float32 sum of
    ``s^2`` over this program's columns to ``ESq[m, pid]`` (``nprog`` partials per row)."""
    omask = nmask[:, None] & mmask[None, :]
    r = tl.load(ERes + m[None, :].to(tl.int64) * stride_er + n[:, None], mask=omask, other=0.0)
    s = round_to(y.to(tl.float32) + r.to(tl.float32), dt, RNE)
    sf = tl.where(omask, s.to(tl.float32), 0.0)
    nw = tl.load(ENW + n, mask=nmask, other=0.0).to(tl.float32)
    tl.store(EU + m[None, :].to(tl.int64) * stride_u + n[:, None], round_to(sf * nw[:, None], dt, RNE), mask=omask)
    tl.store(ESq + m * nprog + pid, tl.sum(sf * sf, axis=0), mask=mmask)
    return s


@triton.jit
def _input_product(X, Ids, Res, ResOut, NW, Sq, NSQ, SIds, W, wrow, wmask, M, K, stride_x, stride_r, stride_w, eps,
                   BLOCK_R: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr,
                   GATHER: tl.constexpr, HAS_RES: tl.constexpr, HAS_NORM: tl.constexpr, WRITE_RES: tl.constexpr,
                   PRE_RSTD: tl.constexpr, DOT: tl.constexpr, DOT_F32: tl.constexpr, PREC: tl.constexpr,
                   RNE: tl.constexpr, TWO_PASS: tl.constexpr):
    """What every kernel here does after ``pdl_enter``: its weight rows ``wrow`` against the
    prologue's input rows, normalised -> (acc [BLOCK_R, BLOCK_M] float32, token rows m, their
    mask). PRE_RSTD: the producer's partial sums of squares are loaded before the K loop and
    reduced after it."""
    m, mmask, xoff, roff = _rows(Ids, SIds, M, stride_x, stride_r, BLOCK_M, GATHER)
    if PRE_RSTD:
        part = _partials(Sq, NSQ, m, mmask, BLOCK_S)
    rstd = _prologue_stats(X, xoff, Res, roff, ResOut, m, mmask, K, eps, BLOCK_M, BLOCK_K, HAS_RES, HAS_NORM,
                           WRITE_RES, RNE, TWO_PASS)
    acc = _gemv_tile(X, xoff, Res, roff, ResOut, NW, rstd, W, wrow, wmask, stride_w, m, mmask, K, eps, BLOCK_R,
                     BLOCK_M, BLOCK_K, HAS_RES, HAS_NORM, WRITE_RES, DOT, DOT_F32, PREC, RNE, TWO_PASS)
    if PRE_RSTD:
        acc = acc * _rstd_of(part, K, eps)[None, :]
    return acc, m, mmask


@triton.jit(do_not_specialize=["M"])
def linear_kernel(X, Ids, Res, ResOut, NW, Sq, NSQ, SIds, W, WScale, Bias, Out, PMax, PIdx, Argmax, Sem,
                  ERes, ENW, EU, ESq, M, N, K, stride_x, stride_r, stride_w, stride_o, stride_er, stride_eu, eps,
                  BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
                  GATHER: tl.constexpr, HAS_RES: tl.constexpr, HAS_NORM: tl.constexpr, WRITE_RES: tl.constexpr,
                  PRE_RSTD: tl.constexpr, BLOCK_S: tl.constexpr, HAS_WSCALE: tl.constexpr,
                  HAS_BIAS: tl.constexpr, ARGMAX: tl.constexpr, ADD_NORM: tl.constexpr, DOT: tl.constexpr,
                  DOT_F32: tl.constexpr, PREC: tl.constexpr, RNE: tl.constexpr, TWO_PASS: tl.constexpr,
                  PDL: tl.constexpr, PREFETCH: tl.constexpr, LINE: tl.constexpr, ROUND: tl.constexpr):
    pid = tl.program_id(0)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    if PREFETCH:
        _prefetch_rows(W, n.to(tl.int64), nmask, stride_w, tl.minimum(K, BLOCK_K), LINE)
    pdl_enter(PDL)
    acc, m, mmask = _input_product(X, Ids, Res, ResOut, NW, Sq, NSQ, SIds, W, n.to(tl.int64), nmask, M, K, stride_x,
                                   stride_r, stride_w, eps, BLOCK_N, BLOCK_M, BLOCK_K, BLOCK_S, GATHER, HAS_RES,
                                   HAS_NORM, WRITE_RES, PRE_RSTD, DOT, DOT_F32, PREC, RNE, TWO_PASS)
    pdl_release_late(PDL)
    if HAS_WSCALE:
        acc = acc * tl.load(WScale + n, mask=nmask, other=0.0)[:, None]
    if HAS_BIAS:
        acc += tl.load(Bias + n, mask=nmask, other=0.0).to(tl.float32)[:, None]
    if ROUND:
        y = round_to(acc, X.dtype.element_ty, RNE)
    else:  # float32 sums as they are (``exact_f32``)
        y = acc
    omask = nmask[:, None] & mmask[None, :]
    if ADD_NORM:
        y = _add_norm_epilogue(y, ERes, ENW, EU, ESq, n, nmask, m, mmask, pid, tl.num_programs(0), stride_er,
                               stride_eu, X.dtype.element_ty, RNE)
    tl.store(Out + m[None, :].to(tl.int64) * stride_o + n[:, None], y.to(Out.dtype.element_ty), mask=omask)
    if ARGMAX:
        nprog = tl.num_programs(0)
        _argmax_partial(y, n, nmask, m, mmask, PMax, PIdx, pid, nprog, N)
        tl.debug_barrier()  # every thread's partial stored before the ticket releases them
        ticket = tl.atomic_add(Sem, 1, sem="acq_rel")
        if ticket == nprog - 1:
            _argmax_finish(PMax, PIdx, Argmax, m, mmask, nprog, N, BLOCK_M, BLOCK_P)
            tl.atomic_xchg(Sem, 0)  # ready for the next launch (stream order publishes it)


@triton.jit(do_not_specialize=["M"])
def qkv_rope_kernel(X, Ids, Res, ResOut, NW, Sq, NSQ, SIds, W, Bias, Out, KPool, VPool, Loc, Pos, CosSin, X2, NW2,
                    Add, M, K, K2, stride_x, stride_r, stride_x2, stride_w, stride_o, stride_ks, stride_kh, stride_vs,
                    stride_vh, stride_cs, stride_add, eps, HQ: tl.constexpr, HKV: tl.constexpr, HEAD_DIM: tl.constexpr,
                    BLOCK_P: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, GATHER: tl.constexpr,
                    HAS_RES: tl.constexpr, HAS_NORM: tl.constexpr, WRITE_RES: tl.constexpr, PRE_RSTD: tl.constexpr,
                    BLOCK_S: tl.constexpr, HAS_BIAS: tl.constexpr, DOT: tl.constexpr, DOT_F32: tl.constexpr,
                    PREC: tl.constexpr, RNE: tl.constexpr, TWO_PASS: tl.constexpr, DUAL: tl.constexpr,
                    HAS_ADD: tl.constexpr, PDL: tl.constexpr, PREFETCH: tl.constexpr, LINE: tl.constexpr):
    """Program = ``BLOCK_P`` rope pairs of one head (q heads, then k, then v, the QKV row order).
    DUAL: the input row is ``concat(norm(x)[:K], norm2(x2)[:K2])`` (``_dual_tile`` on FMA tiles).
    HAS_ADD: ``Add`` [M, N] float32 (row stride ``stride_add``) is added to the float32 sums
    before the bias: the product of weight columns this launch does not stream, computed apart."""
    HALF: tl.constexpr = HEAD_DIM // 2
    PER_HEAD: tl.constexpr = HALF // BLOCK_P
    pid = tl.program_id(0)
    head = pid // PER_HEAD
    p = (pid % PER_HEAD) * BLOCK_P + tl.arange(0, BLOCK_P)  # pair index inside the head
    r = tl.arange(0, 2 * BLOCK_P)
    wrow = (head * HEAD_DIM + (pid % PER_HEAD) * BLOCK_P + r // 2 + (r % 2) * HALF).to(tl.int64)
    if PREFETCH:
        _prefetch_rows(W, wrow, r < 2 * BLOCK_P, stride_w, tl.minimum(K, BLOCK_K), LINE)
        if DUAL and not DOT:  # the one loop's first step reads the second input's columns too
            _prefetch_rows(W + K, wrow, r < 2 * BLOCK_P, stride_w, tl.minimum(K2, BLOCK_K), LINE)
    pdl_enter(PDL)
    if HAS_ADD:  # loaded before the K loop: its latency hides under the weight stream
        m_add = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        addend = tl.load(Add + m_add[None, :].to(tl.int64) * stride_add + wrow[:, None], mask=(m_add < M)[None, :],
                         other=0.0)
    if DUAL and not DOT:  # EAGLE-3: columns [0, K) against norm(x rows), [K, K + K2) against norm2(x2)
        m, mmask, xoff, _ = _rows(Ids, SIds, M, stride_x, stride_r, BLOCK_M, GATHER)
        acc = _dual_tile(X, xoff, NW, X2, m.to(tl.int64) * stride_x2, NW2, W, wrow, r < 2 * BLOCK_P, stride_w, mmask,
                         K, K2, eps, 2 * BLOCK_P, BLOCK_M, BLOCK_K, RNE)
    else:
        acc, m, mmask = _input_product(X, Ids, Res, ResOut, NW, Sq, NSQ, SIds, W, wrow, r < 2 * BLOCK_P, M, K,
                                       stride_x, stride_r, stride_w, eps, 2 * BLOCK_P, BLOCK_M, BLOCK_K, BLOCK_S,
                                       GATHER, HAS_RES, HAS_NORM, WRITE_RES, PRE_RSTD, DOT, DOT_F32, PREC, RNE,
                                       TWO_PASS)
        if DUAL:  # dot tiles: the feature's half in a second loop (weight columns K .. K + K2)
            x2off = m.to(tl.int64) * stride_x2
            one = tl.full([BLOCK_M], 1.0, tl.float32)  # its one-pass norm makes its own rstd
            acc += _gemv_tile(X2, x2off, X2, x2off, X2, NW2, one, W + K, wrow, r < 2 * BLOCK_P, stride_w, m, mmask,
                              K2, eps, 2 * BLOCK_P, BLOCK_M, BLOCK_K, False, True, False, DOT, DOT_F32, PREC, RNE,
                              False)
    pdl_release_late(PDL)
    if HAS_ADD:
        acc += addend
    if HAS_BIAS:
        acc += tl.load(Bias + wrow).to(tl.float32)[:, None]
    lo, hi = _halves(acc, BLOCK_P, BLOCK_M)
    dt = X.dtype.element_ty
    lo = round_to(lo, dt, RNE)  # the QKV projection's output, as stored by the unfused GEMM
    hi = round_to(hi, dt, RNE)
    omask = (p[:, None] < HALF) & mmask[None, :]
    if head < HQ + HKV:  # q and k rotate; v does not
        pos = tl.load(Pos + m, mask=mmask, other=0).to(tl.int64)
        cs = CosSin + pos[None, :] * stride_cs + p[:, None]
        cos = tl.load(cs, mask=omask, other=0.0).to(tl.float32)
        sin = tl.load(cs + HALF, mask=omask, other=0.0).to(tl.float32)
        lo, hi = rotary_kernels.rotate(lo, hi, cos, sin, dt, RNE)
    out = Out + m[None, :].to(tl.int64) * stride_o + head * HEAD_DIM + p[:, None]
    tl.store(out, lo, mask=omask)
    tl.store(out + HALF, hi, mask=omask)
    if head >= HQ:  # k (rotated) and v rows of this token into their pool slots
        slot = tl.load(Loc + m, mask=mmask, other=0).to(tl.int64)
        if head < HQ + HKV:
            dst = KPool + slot[None, :] * stride_ks + (head - HQ) * stride_kh + p[:, None]
        else:
            dst = VPool + slot[None, :] * stride_vs + (head - HQ - HKV) * stride_vh + p[:, None]
        tl.store(dst, lo, mask=omask)
        tl.store(dst + HALF, hi, mask=omask)


@triton.jit
def gate_up_rows(BLOCK_P: tl.constexpr, INTER):
    """This program's ``BLOCK_P`` intermediate columns as gate/up weight rows, interleaved (row
    ``2p`` gate column ``i``, ``2p + 1`` up column ``INTER + i``: one product serves both,
    ``_halves`` splits them): (intermediate column of each row, weight row) [2 BLOCK_P] each."""
    r = tl.arange(0, 2 * BLOCK_P)
    ri = tl.program_id(0) * BLOCK_P + r // 2
    return ri, (ri + (r % 2) * INTER).to(tl.int64)


@triton.jit(do_not_specialize=["M"])
def gate_up_kernel(X, Ids, Res, ResOut, NW, Sq, NSQ, SIds, W, Out, M, K, INTER, stride_x, stride_r, stride_w, stride_o,
                   eps, BLOCK_P: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, GATHER: tl.constexpr,
                   HAS_RES: tl.constexpr, HAS_NORM: tl.constexpr, WRITE_RES: tl.constexpr, PRE_RSTD: tl.constexpr,
                   BLOCK_S: tl.constexpr, DOT: tl.constexpr,
                   DOT_F32: tl.constexpr, PREC: tl.constexpr, RNE: tl.constexpr, TWO_PASS: tl.constexpr,
                   PDL: tl.constexpr, PREFETCH: tl.constexpr, LINE: tl.constexpr):
    """Program = ``BLOCK_P`` intermediate columns: gate rows ``i`` and up rows ``INTER + i``."""
    pid = tl.program_id(0)
    ri, wrow = gate_up_rows(BLOCK_P, INTER)
    if PREFETCH:
        _prefetch_rows(W, wrow, ri < INTER, stride_w, tl.minimum(K, BLOCK_K), LINE)
    pdl_enter(PDL)
    acc, m, mmask = _input_product(X, Ids, Res, ResOut, NW, Sq, NSQ, SIds, W, wrow, ri < INTER, M, K, stride_x, stride_r,
                                   stride_w, eps, 2 * BLOCK_P, BLOCK_M, BLOCK_K, BLOCK_S, GATHER, HAS_RES, HAS_NORM,
                                   WRITE_RES, PRE_RSTD, DOT, DOT_F32, PREC, RNE, TWO_PASS)
    pdl_release_late(PDL)
    gate, up = _halves(acc, BLOCK_P, BLOCK_M)
    dt = X.dtype.element_ty
    y = silu_mul(round_to(gate, dt, RNE), round_to(up, dt, RNE), dt, RNE)
    i = pid * BLOCK_P + tl.arange(0, BLOCK_P)
    tl.store(Out + m[None, :].to(tl.int64) * stride_o + i[:, None], y, mask=(i[:, None] < INTER) & mmask[None, :])

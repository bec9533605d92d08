"""Triton kernels for the sampled draft step of the fused speculative graph.

Inside a captured graph every tiny torch op is one more kernel node to replay; ``uniform_row``
and ``choose`` stand in for chains of a few dozen of them, ``topk_rows`` for torch's top-k.

``uniform_row`` (a jit helper: ``row_io.read_rows`` draws the iteration's uniforms in its launch):
the counter-based uniforms of ``device_rng.uniform``, bit for bit. One program per row; the row's
``n`` columns are one ``BLOCK_N = next_pow2(n)`` tile. All integer math is
int64 exactly as in the torch reference (every operand is masked to 32 bits before a multiply,
so no product reaches 2**63), and the float steps (an exact int-to-float conversion of 23 bits,
one IEEE round-to-nearest add, a power-of-two scale) round the same everywhere, so CPU torch,
CUDA torch and this kernel agree on every bit. The stream constant is computed on the
host (it is a Python int in the reference too) and passed as a kernel argument.

``choose``: the draft's sampling distribution ``q`` over its best ``K`` logits (temperature,
top-k, top-p, min-p) and one inverse-CDF draw from it. Grid: one program per row; the row is one
``BLOCK_K = next_pow2(K)`` tile with the tail lanes loaded as ``-inf`` logits (zero probability,
never kept, never counted by the search). Numerics: softmax, cumulative sums and the search are
float32 (the torch reference runs the search in float64 like ``device_rng.inverse_cdf``), so
``q`` matches to float32 rounding and the pick matches unless ``u * total`` lies within rounding
of a cumulative-sum boundary. The filter comparisons are exact, so a row whose cumulative sum sits
within rounding of ``top_p`` (or whose ``p`` sits at ``min_p * p_0``) may keep a different set
than the reference; both are valid distributions, and rejection sampling only needs the ``q``
that was actually drawn from, which is the one returned.

``argmax_rows``: the greedy pick of a row of logits (first index among equal maxima, NaN above
every number, as ``torch.argmax``), mapped to a target id in the same launch (EAGLE-3's
``target = draft + d2t[draft]`` or a token map's ``hot_ids[draft]``): one kernel where torch runs
an argmax reduction, a gather and an add per draft step. One program per row, the row read in
register tiles of up to ``MAX_TOPK_ROW`` values (a draft vocabulary: one tile; a target's
vocabulary, for the verify's greedy acceptance: a few).

``topk_rows``: the k best of a row of at most ``MAX_TOPK_ROW`` values, best first, where torch's
topk runs a radix select and a sort of the k (two kernels, ~45 us at batch 1 on an H100 for 64 of
8,192). Grid: one program per row; the row is one ``BLOCK = next_pow2(V)`` register tile, read
once. The k-th largest value is found exactly by bisection on an order-preserving integer key of
its float bits, between the smallest of ``next_pow2(k)`` group maxima and the largest key (one
count over the tile per step: ~8 for a row of logits, at most 16 for bf16 and 32 for float32
keys); the values above it and the first of its ties in index order are compacted by one prefix
scan into the output row, which is then sorted in place by a k x k rank (descending value, ties
by index).

Dispatch: the launchers run the kernel on CUDA tensors and, for tests, on CPU tensors when the
Triton interpreter is on; otherwise they fall back to the torch references. The interpreter
switch is read by triton when a kernel is *defined*, so ``TRITON_INTERPRET`` must be set before
this module is imported (``tests/conftest.py`` does that on machines without CUDA).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import num_warps, pdl_enter, pdl_opts
from updraft.spec import device_rng

if TYPE_CHECKING:
    from updraft.models.llama import RowScale

#: Largest candidate count ``choose`` takes: one row is one register tile.
MAX_K = 256

# Hash constants: must stay those of ``device_rng`` (the bit-identity test catches a drift).
_M32 = tl.constexpr(0xFFFFFFFF)
_MUL = tl.constexpr(0x45D9F3B)
_COL = tl.constexpr(0x632BE5AB)


def interpreter_on() -> bool:
    """Whether triton runs kernels in its CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def use_triton(t: torch.Tensor) -> bool:
    """Whether the launchers run the kernel for inputs on ``t``'s device (else torch)."""
    return t.is_cuda or interpreter_on()


# ---- uniform ---------------------------------------------------------------------------------
@triton.jit
def _mix32(x):
    """``device_rng._mix32`` on int64 values (the literals promote to int64, never to uint32)."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = (x * _MUL) & _M32
    x = x ^ (x >> 16)
    x = (x * _MUL) & _M32
    return x ^ (x >> 16)


@triton.jit
def uniform_row(Seed, s_seed, Offset, s_offset, src, Out, stream_c, n, BLOCK_N: tl.constexpr):
    """``Out[:n]`` = the ``n`` uniforms of RNG row ``src`` (``device_rng.uniform``, bit for bit):
    a jit helper, so another kernel can draw them in its own launch (``row_io.read_rows``)."""
    seed = tl.load(Seed + src * s_seed).to(tl.int64)
    offset = tl.load(Offset + src * s_offset).to(tl.int64)
    # stream_c may arrive as int32 (small streams) or int64 (>= 2**31): widen before mixing.
    k = _mix32(seed ^ stream_c.to(tl.int64))
    k = _mix32(k ^ (seed >> 32))  # arithmetic shift, as torch's on int64
    key = _mix32(k ^ offset)
    cols = tl.arange(0, BLOCK_N).to(tl.int64)  # int64 before the multiply: c * _COL > 2**31
    bits = _mix32((key + cols * _COL) ^ (key >> 7))
    # Same float steps as the reference (all exact: 23 bits + 0.5 fit float32's 24).
    u = ((bits >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)
    tl.store(Out + cols, u, mask=cols < n)


def stream_constant(stream: int) -> int:
    """The host-side constant of RNG stream ``stream`` that ``uniform_row`` takes."""
    return (stream * 0x9E3779B1) & 0xFFFFFFFF


# ---- choose ----------------------------------------------------------------------------------
def choose_reference(
    vals: torch.Tensor,
    temp: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    u: torch.Tensor,
    row_scale: RowScale | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch version of ``choose`` (same arguments and results); the search runs in float64."""
    k = vals.shape[-1]
    j = torch.arange(k, device=vals.device)
    x = vals.float() * row_scale.factor()[:, None] if row_scale is not None else vals.float()
    p = torch.softmax(x / temp.float()[:, None], dim=-1)
    keep = (
        (j[None, :] < torch.where(top_k > 0, top_k, k)[:, None])
        & (torch.cumsum(p, -1) - p < top_p.float()[:, None])
        & (p >= min_p.float()[:, None] * p[:, :1])
    )
    q = torch.where(keep, p, 0.0)
    q = q / q.sum(-1, keepdim=True)
    # Should u * total round up to the total, the search runs off the row and the clamp to K - 1
    # lands in the zero tail: take the last q > 0 entry instead, as the kernel does.
    last_pos = torch.where(q > 0, j, 0).amax(-1)
    return q, torch.minimum(device_rng.inverse_cdf(q, u), last_pos)


@triton.jit
def _choose_kernel(
    Vals, s_vals, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, MinP, s_min_p, U, s_u, Q, s_q,
    Ids, s_ids, IdsOut, s_ids_out, Pick, s_pick, Sq, s_sq, n_sq, width, eps, K: tl.constexpr,
    BLOCK_K: tl.constexpr, HAS_IDS: tl.constexpr, COPY_IDS: tl.constexpr, SCALE: tl.constexpr,
    BLOCK_SQ: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_K)
    valid = j < K
    x = tl.load(Vals + row * s_vals + j, mask=valid, other=float("-inf")).to(tl.float32)
    if SCALE:  # the row's positive factor (RowScale): its partial sums of squares, summed in order
        i = tl.arange(0, BLOCK_SQ)
        sq = tl.sum(tl.load(Sq + row * s_sq + i, mask=i < n_sq, other=0.0), axis=0)
        x = x * tl.rsqrt(sq / width + eps)
    x = x / tl.load(Temp + row * s_temp).to(tl.float32)
    # exp(-inf) = 0: masked lanes have p = 0 and add nothing to any sum below.
    e = tl.exp(x - tl.max(x, axis=0))
    p = e / tl.sum(e, axis=0)
    # top_k of any dtype (RowState holds it as float32): compared, never converted.
    top_k = tl.load(TopK + row * s_top_k)
    k_eff = tl.where(top_k > 0, top_k, K)
    p0 = tl.sum(tl.where(j == 0, p, 0.0), axis=0)  # entry 0, as the reference's p[:, :1]
    keep = (
        valid
        & (j < k_eff)
        & (tl.cumsum(p, axis=0) - p < tl.load(TopP + row * s_top_p).to(tl.float32))
        & (p >= tl.load(MinP + row * s_min_p).to(tl.float32) * p0)
    )
    q = tl.where(keep, p, 0.0)
    q = q / tl.sum(q, axis=0)
    tl.store(Q + row * s_q + j, q, mask=valid)
    # Inverse CDF: the first entry whose running sum exceeds u * total, i.e. the number of
    # entries whose running sum is <= it (searchsorted right; the running sum never decreases,
    # and masked lanes are excluded from the count). The total is the running sum's last value
    # (its max), not a separately rounded sum, so the search is consistent with its own scale.
    cq = tl.cumsum(q, axis=0)
    target = tl.load(U + row * s_u).to(tl.float32) * tl.max(tl.where(valid, cq, 0.0), axis=0)
    pick = tl.sum((valid & (cq <= target)).to(tl.int64), axis=0)
    # The entry found always has q > 0 (its running sum rose past the previous one). Only when
    # no running sum exceeds the target (u * total rounded up to total) does the count run past
    # the last positive entry into the zero tail or off the row: take the last q > 0 entry then.
    # This one min is both the clamp to K - 1 and that guard.
    pick = tl.minimum(pick, tl.max(tl.where(q > 0, j, 0), axis=0).to(tl.int64))
    if HAS_IDS:  # the pick as its candidate's id (and the ids copied beside q)
        ids = tl.load(Ids + row * s_ids + j, mask=valid, other=0)
        if COPY_IDS:
            tl.store(IdsOut + row * s_ids_out + j, ids, mask=valid)
        pick = tl.sum(tl.where(j == pick, ids, 0), axis=0).to(tl.int64)
    tl.store(Pick + row * s_pick, pick)


def choose(
    vals: torch.Tensor,
    temp: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    u: torch.Tensor,
    ids: torch.Tensor | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    pick_out: torch.Tensor | None = None,
    row_scale: RowScale | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampling distribution over each row's candidates and one draw from it.

    ``vals`` [B, K]: a row's best ``K <= MAX_K`` logits sorted descending (``topk``).
    ``temp`` [B] (> 0; greedy rows pass 1 with ``top_k`` 1), ``top_k`` [B] (0 or >= K: off; any
    dtype), ``top_p`` [B] (pass ``inf`` to turn it off: with 1.0 a running sum rounded to 1 would
    drop the tail), ``min_p`` [B] (0: off), ``u`` [B] uniforms in (0, 1). Every [B] argument and
    the rows of ``vals`` may be strided (read in place: columns of a packed table cost no copy).

    Returns ``q`` [B, K] float32 (softmax of ``vals / temp`` restricted to the entries kept by
    all three filters, renormalised; entry 0 is always kept) and ``pick`` [B] int64, the index
    drawn from ``q`` by inverse CDF with ``u`` (never a zero-``q`` entry).

    ``ids`` [B, K] int64 (the candidates' token ids; rows may be strided): the pick is returned
    as ``ids[b, pick]`` instead. ``out`` (needs ``ids``): [B, K] float32 and int64 tensors (rows
    may be strided, e.g. one draft step's slices of a [B, S, K] buffer) that receive ``q`` and a
    copy of ``ids`` and are returned as ``q``; one kernel where a gather and stacks would be.
    ``pick_out`` [B] int64 (any stride, e.g. a column of the verify block's ids): receives the
    pick and is returned as it. ``row_scale``: ``vals`` are the logits without each row's
    positive factor (``ModelOutput.row_scale``; a positive factor keeps the order, so the top
    ``K`` of the unscaled logits are the same candidates); it is applied before ``temp``."""
    b, k = vals.shape
    assert 0 < k <= MAX_K, f"choose: {k} candidates (at most {MAX_K})"
    assert out is None or ids is not None, "choose: out needs ids"
    if not use_triton(vals):
        q, pick = choose_reference(vals, temp, top_k, top_p, min_p, u, row_scale)
        if ids is not None:
            pick = ids.gather(1, pick[:, None]).squeeze(1)
            if out is not None:
                q = out[0].copy_(q)
                out[1].copy_(ids)
        return q, (pick_out.copy_(pick) if pick_out is not None else pick)
    q = out[0] if out is not None else torch.empty((b, k), dtype=torch.float32, device=vals.device)
    pick = pick_out if pick_out is not None else torch.empty(b, dtype=torch.int64, device=vals.device)
    assert pick.shape == (b,) and pick.dtype == torch.int64, "choose: pick_out must be [B] int64"
    if b == 0:
        return q, pick
    ids_in = ids if ids is not None else pick  # a placeholder pointer when there are no ids
    ids_out = out[1] if out is not None else ids_in
    rows = [vals, q] + ([ids_in, ids_out] if ids is not None else [])
    assert all(t.shape == (b, k) and (t.stride(1) == 1 or k == 1) for t in rows), "choose: [B, K], contiguous along K"
    block_k = triton.next_power_of_2(k)
    sq = row_scale.sumsq if row_scale is not None else q
    if row_scale is not None:
        assert sq.shape[0] == b and sq.dtype == torch.float32 and sq.stride(1) == 1, "choose: row_scale.sumsq [B, P] float32"
    _choose_kernel[(b,)](
        vals, vals.stride(0), temp, temp.stride(0), top_k, top_k.stride(0), top_p, top_p.stride(0),
        min_p, min_p.stride(0), u, u.stride(0), q, q.stride(0), ids_in, ids_in.stride(0), ids_out,
        ids_out.stride(0), pick, pick.stride(0), sq, sq.stride(0), sq.shape[1] if row_scale is not None else 0,
        row_scale.width if row_scale is not None else 1, row_scale.eps if row_scale is not None else 0.0,
        K=k, BLOCK_K=block_k, HAS_IDS=ids is not None, COPY_IDS=out is not None, SCALE=row_scale is not None,
        BLOCK_SQ=triton.next_power_of_2(sq.shape[1]) if row_scale is not None else 1,
        num_warps=min(4, num_warps(block_k)), **pdl_opts(vals.device, "sampling"),
    )
    return q, pick


# ---- topk_rows -------------------------------------------------------------------------------
#: Longest row ``topk_rows`` takes: the row is one register tile of ``next_pow2(V)`` values.
MAX_TOPK_ROW = 16384
#: Whether the fused iteration's sampled draft steps use ``topk_rows`` on CUDA (under the Triton
#: interpreter it always runs). On the H100 it matched torch and its reference, and took the
#: SmolLM2 sampled S = 5 cycle from 2.111 to 1.983 ms at bs 1 (2.212 to 2.083 at bs 8; 11 us a
#: call in a graph against torch's 35 us: benchmarks/results/2026-11-25-h100-filter). False keeps
#: torch's topk (``benchmarks/sampled_tune.py`` times both).
TOPK_ON_CUDA = True

_POS_NAN = tl.constexpr(0x7FC00000)  # the float32 bits every NaN is replaced with (ranks top)
_LOW16 = tl.constexpr(0xFFFF)


def topk_rows_reference(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch version of ``topk_rows`` (same order, ties and NaN rule): a stable descending sort
    of the rows as float32 (NaN sorts first; -0.0 and +0.0 are equal, so they tie). Every NaN is
    made +NaN first: CUDA's sort ranks a sign-bit NaN last, the CPU's first."""
    x = logits.float()
    x = torch.where(x.isnan(), torch.full_like(x, math.nan), x)
    vals, idx = torch.sort(x, dim=-1, descending=True, stable=True)
    return vals[:, :k], idx[:, :k]


@triton.jit
def _order_key(bits):
    """Order-preserving int32 key of float32 bits: a negative float keeps its sign bit and has
    its magnitude bits flipped, so signed integer order is float order."""
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _kth_key(key, K: tl.constexpr, NB: tl.constexpr, G: tl.constexpr, BLOCK: tl.constexpr):
    """The K-th largest of ``key`` (NB-bit signed values; padding lanes hold the minimum, which
    no real value has): the largest T with at least K keys >= T, by bisection on [lo, hi] with
    one count over the tile per step. ``lo`` is the smallest of the maxima of ``G >= K`` groups of
    the tile (each group has a key >= it, so at least K do) and ``hi`` the largest key: the top of
    a row of logits spans a few hundred bf16 values, so ~8 steps where bisecting every key bit
    took NB (16 for bf16)."""
    gmax = tl.max(tl.reshape(key, [G, BLOCK // G]), axis=1)
    lo = tl.min(gmax, axis=0)
    hi = tl.max(gmax, axis=0)
    if NB > 30:  # float32 keys: hi - lo may not fit in int32
        lo = lo.to(tl.int64)
        hi = hi.to(tl.int64)
    while lo < hi:  # count(key >= lo) >= K throughout; hi >= the answer
        mid = lo + ((hi - lo + 1) >> 1)
        ok = tl.sum((key >= mid).to(tl.int32), axis=0) >= K
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid - 1)
    return lo


@triton.jit
def _canonical_bits(x):
    """float32 bits with every NaN made +NaN (ranks above +inf, as in torch) and -0.0 made +0.0
    (so the two zeros tie instead of ranking by sign)."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(x != x, _POS_NAN, tl.where(x == 0.0, 0, bits))


@triton.jit
def _topk_rows_kernel(X, s_x, OutV, s_ov, OutI, s_oi, Map, V, K: tl.constexpr, KP2: tl.constexpr,
                      BLOCK: tl.constexpr, SHIFT: tl.constexpr, MAP: tl.constexpr, ADD: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * s_x
    j = tl.arange(0, BLOCK)
    valid = j < V
    # Narrow inputs (bf16: SHIFT 16) leave the low float32 bits constant: the key drops them, so
    # the search runs one count per significant bit only. Padding lanes get the minimum key.
    # Only the key stays live through the search (the values are re-read for the K selected).
    NB: tl.constexpr = 32 - SHIFT
    x = tl.load(x_row + j, mask=valid, other=0.0).to(tl.float32)
    key = tl.where(valid, _order_key(_canonical_bits(x)) >> SHIFT, -(1 << (NB - 1)))
    t = _kth_key(key, K, NB, KP2, BLOCK)
    gt = key > t
    eq = valid & (key == t)
    # Both prefix counts in one scan: ties in the high half, keys above t in the low half (each
    # count <= BLOCK <= 2**14 fits 16 bits). Selected: every key > t, then the first
    # ``K - #(key > t)`` ties in index order; a selected lane's slot is how many selected lanes
    # precede it (the compaction keeps index order).
    c = tl.cumsum(gt.to(tl.int32) + (eq.to(tl.int32) << 16), axis=0)
    need = K - tl.sum(gt.to(tl.int32), axis=0)
    eq_before = (c >> 16) - eq.to(tl.int32)
    sel = gt | (eq & (eq_before < need))
    slot = (c & _LOW16) - gt.to(tl.int32) + tl.minimum(eq_before, need)
    ov = OutV + row * s_ov
    oi = OutI + row * s_oi
    tl.store(oi + slot, j.to(tl.int64), mask=sel)
    # The K selected indices are now in the output row in index order. Sort them in place: a
    # pair's rank is how many pairs precede it (larger key, or equal key at a smaller slot, so
    # ties stay in index order). The barriers order other threads' stores before these loads
    # and these loads before the stores over them (one program: same SM, visible after a sync).
    tl.debug_barrier()
    s = tl.arange(0, KP2)
    ks = s < K
    i = tl.load(oi + s, mask=ks, other=0)
    bits = _canonical_bits(tl.load(x_row + i, mask=ks, other=0.0).to(tl.float32))
    kk = _order_key(bits)
    ka, kb = kk[:, None], kk[None, :]
    before = ks[None, :] & ((kb > ka) | ((kb == ka) & (s[None, :] < s[:, None])))
    rank = tl.sum(before.to(tl.int32), axis=1)
    tl.debug_barrier()
    tl.store(ov + rank, bits.to(tl.float32, bitcast=True), mask=ks)
    if MAP:  # to target ids (after the sort: it re-reads the logits at the draft indices)
        m = tl.load(Map + i, mask=ks, other=0).to(tl.int64)
        i = i + m if ADD else m
    tl.store(oi + rank, i, mask=ks)


def topk_rows(logits: torch.Tensor, k: int, out_vals: torch.Tensor | None = None,
              out_idx: torch.Tensor | None = None,
              target: tuple[torch.Tensor, bool] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest values of each row of ``logits`` [B, V] (``V <= MAX_TOPK_ROW``; any
    float dtype, rows may be strided) and their indices, best first, in ONE launch of one
    program per row; on inputs the kernels do not run on (``use_triton``), the torch reference.

    Returns ``(vals, idx)``: [B, k] float32 and int64 (``out_vals`` / ``out_idx`` when given:
    rows may be strided, contiguous along k). Order: descending value, equal values by
    ascending index, so the result is deterministic; which of several values equal to the
    k-th are kept follows the same rule (the smallest indices). NaN ranks above every number
    (all NaNs equal), -inf below every finite value, -0.0 equals +0.0 (returned as +0.0).
    float64 rows are ranked by their float32 rounding (the values returned are exactly the
    float32 roundings of the true k largest; values that round alike are ties). ``target``
    ``(table, add)``: the indices returned are mapped to ``idx + table[idx]`` (``add``) or
    ``table[idx]`` in the same launch (a draft vocabulary's target ids)."""
    table, add = target if target is not None else (None, True)
    b, v = logits.shape
    assert 0 < k <= v <= MAX_TOPK_ROW, f"topk_rows: k {k} of {v} (at most {MAX_TOPK_ROW} values a row)"
    if not use_triton(logits):
        vals, idx = topk_rows_reference(logits, k)
        if table is not None:
            idx = idx + table[idx] if add else table[idx]
        return (out_vals.copy_(vals) if out_vals is not None else vals,
                out_idx.copy_(idx) if out_idx is not None else idx)
    dev = logits.device
    vals = out_vals if out_vals is not None else torch.empty((b, k), dtype=torch.float32, device=dev)
    idx = out_idx if out_idx is not None else torch.empty((b, k), dtype=torch.int64, device=dev)
    assert vals.shape == idx.shape == (b, k) and vals.dtype == torch.float32 and idx.dtype == torch.int64
    assert logits.stride(1) == 1 and (k == 1 or vals.stride(1) == idx.stride(1) == 1), "topk_rows: rows contiguous"
    if b == 0:
        return vals, idx
    # Low float32 bits that are constant for every value of the input dtype (bf16: 16, fp16: 13).
    shift = {torch.bfloat16: 16, torch.float16: 13}.get(logits.dtype, 0)
    block, kp2 = triton.next_power_of_2(v), triton.next_power_of_2(k)
    _topk_rows_kernel[(b,)](
        logits, logits.stride(0), vals, vals.stride(0), idx, idx.stride(0), table if table is not None else idx, v,
        K=k, KP2=kp2, BLOCK=block, SHIFT=shift, MAP=table is not None, ADD=add,
        num_warps=num_warps(max(block, kp2 * kp2), per_thread=16), **pdl_opts(logits.device, "sampling"),
    )
    return vals, idx


# ---- argmax_rows -----------------------------------------------------------------------------
@triton.jit
def row_argmax(X, V, BLOCK: tl.constexpr):
    """``(best, index)`` of the ``V`` values at ``X`` (float32, int64), read in chunks of ``BLOCK``:
    each chunk's best (first index among ties), kept only where it beats the running best
    strictly, so the first index wins across chunks too. NaN ranks above every number and an all
    -inf row gives index 0, as ``torch.argmax``."""
    i = tl.arange(0, BLOCK)
    best = tl.full([], float("-inf"), tl.float32)
    arg = tl.zeros([], tl.int64)
    for c0 in range(0, V, BLOCK):
        x = tl.load(X + c0 + i, mask=c0 + i < V, other=float("-inf")).to(tl.float32)
        x = tl.where(x != x, float("inf"), x)
        cb = tl.max(x, axis=0)
        ci = (c0 + tl.min(tl.where(x == cb, i, BLOCK), axis=0)).to(tl.int64)
        arg = tl.where(cb > best, ci, arg)
        best = tl.maximum(best, cb)
    return best, arg


@triton.jit
def target_id(Map, arg, MAP: tl.constexpr, ADD: tl.constexpr):
    """Draft index ``arg`` as a target id: through the table at ``Map`` (``ADD``: an offset, as
    EAGLE-3's ``d2t``; else the id itself, as a token map's) where ``MAP``, else unchanged."""
    if MAP:
        m = tl.load(Map + arg).to(tl.int64)
        arg = arg + m if ADD else m
    return arg


@triton.jit
def _argmax_rows_kernel(X, s_x, Map, Out, s_out, Lock, s_lock, V, BLOCK: tl.constexpr, MAP: tl.constexpr,
                        ADD: tl.constexpr, LOCK: tl.constexpr, PDL: tl.constexpr):
    """One program per row, over its values in chunks of ``BLOCK`` (one chunk up to
    ``MAX_TOPK_ROW`` values; ``row_argmax``). LOCK: a row whose ``Lock`` entry is >= 0 writes it."""
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    _, arg = row_argmax(X + row * s_x, V, BLOCK)
    arg = target_id(Map, arg, MAP, ADD)
    if LOCK:
        lock = tl.load(Lock + row * s_lock)
        arg = tl.where(lock >= 0, lock, arg)
    tl.store(Out + row * s_out, arg)


#: ``argmax_rows``'s values a thread: its warps (16 over a draft's 8,192-value row; 4 warps measured
#: equal in the H100's S = 5 cycle, 2026-12-06)
ARGMAX_PER_THREAD = 16


def argmax_rows(logits: torch.Tensor, target: tuple[torch.Tensor, bool] | None = None,
                out: torch.Tensor | None = None, lock: torch.Tensor | None = None) -> torch.Tensor:
    """``logits.argmax(-1)`` [B] int64 of ``logits`` [B, V] (rows contiguous along V), then, with
    ``target = (table, add)``, ``ids + table[ids]`` (``add``) or ``table[ids]``; one launch where
    Triton runs (``use_triton``), else torch. A row whose values are all -inf picks index 0, as
    torch does. Rows longer than ``MAX_TOPK_ROW`` are read in chunks of it by one program (a
    target's vocabulary: on the H100 torch's argmax over one 102,400-value row took 23 us, 2026-11-26).
    ``out`` [B] int64 (any stride, e.g. a column of the verify block's ids): receives the result
    and is returned as it. ``lock`` [B] int64 (any stride): rows where it is >= 0 take it instead
    (the fused iteration's lookup assist, ``DeviceNgram.locks``)."""
    table, add = target if target is not None else (None, True)
    b, v = logits.shape
    if lock is not None and (lock.shape != (b,) or lock.dtype != torch.int64):
        raise ValueError(f"argmax_rows: lock must be [{b}] int64, got {list(lock.shape)} {lock.dtype}")
    if not use_triton(logits) or logits.stride(1) != 1 or v == 0:
        ids = logits.argmax(-1)
        if table is not None:
            ids = ids + table[ids] if add else table[ids]
        if lock is not None:
            ids = torch.where(lock >= 0, lock, ids)
        return out.copy_(ids) if out is not None else ids
    if out is None:
        out = torch.empty(b, dtype=torch.int64, device=logits.device)
    assert out.shape == (b,) and out.dtype == torch.int64, "argmax_rows: out must be [B] int64"
    if b:
        block = min(triton.next_power_of_2(v), MAX_TOPK_ROW)
        lk = lock if lock is not None else out
        _argmax_rows_kernel[(b,)](logits, logits.stride(0), table if table is not None else out, out, out.stride(0), lk,
                                  lk.stride(0), v, BLOCK=block, MAP=table is not None, ADD=add, LOCK=lock is not None,
                                  num_warps=num_warps(block, per_thread=ARGMAX_PER_THREAD),
                                  **pdl_opts(logits.device, "sampling"))
    return out


def logits_argmax(logits: torch.Tensor, computed: torch.Tensor | None, dst: torch.Tensor | None = None) -> torch.Tensor:
    """``logits.argmax(-1)`` of a forward's logits [..., V]: ``computed`` where its LM head's launch
    took it (``ModelOutput.argmax``, the small-M path), else on CUDA one ``argmax_rows`` launch
    (torch's reduction over a vocabulary row costs 13-23 us on the H100 at a step's batch sizes).
    On CPU torch's argmax, also under the Triton interpreter: there the kernel (tested on its own
    against torch) cost the CPU engine tests ~3 s a test, one interpreted program per verify row.
    ``dst`` (shaped as the result, rows contiguous): receives it and is returned as it."""
    shape = logits.shape[:-1]
    if computed is not None or not logits.is_cuda:
        got = computed.view(shape) if computed is not None else logits.argmax(-1)
        return dst.copy_(got) if dst is not None else got
    flat = dst.view(-1) if dst is not None else None
    return argmax_rows(logits.reshape(-1, logits.shape[-1]), out=flat).view(shape)

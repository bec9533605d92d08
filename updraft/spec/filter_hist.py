"""``filter_rows`` for rows of bf16 values (a bf16 target's logits, bf16 or widened to float32): four
launches that spread each row over many programs, where ``rejection_kernels``'s filter walks
the row from one program (its passes are serial: on the H100 a 6-row verify of the 8B shape's
128k vocabulary spent 874 us there, SmolLM2's 49k 61 us).

A bf16 value has 16 significant bits, so a row is exactly described by a histogram over the
65536 bf16 values: every token of one bin has the same logit, hence the same probability, and
every cut-off of the sampler (top-k, top-p on the top-k renormalised mass, min-p; ties kept) is
a bin. The launches:

1. ``_max_kernel`` (rows x chunks of the vocabulary): per row the finite and NaN / +inf counts,
   and the max with its first index as one int64 ``atomic_max`` of
   ``(bin + 1) << 32 | (2**31 - 1 - index)``; its programs zero the row's bins (in place of a
   memset launch: the two launches cost what one launch and a memset did). A top-k row's groups
   of 64 tokens count their maxima per coarse bin (half a binade).
2. ``_hist_kernel`` (the same grid): each token adds 1 to its value's bin (int32 atomics: exact,
   order-free, deterministic), if a cut-off can reach it: under top-p alone (``tail_bound``) the
   tokens within ``D`` of the row's max, each chunk storing the weight of the others; under top-k
   (``topk_floor``) the tokens at or above the floor of the coarse bin where the group maxima
   counted from the top reach k (k distinct tokens lie at or above it, so the k-th largest value,
   the top-k set's mass and every cut-off of the row do too).
3. ``_block_kernel`` (rows x 32 blocks of 2048 bins): each block's count and mass
   ``sum count * exp2((v - M) * c)`` (float32).
4. ``cut_row`` (one program per row: ``rejection_kernels._filter_kernel``'s launch, whose other rows
   are those without a cut-off, or ``_cut_kernel``'s when ``rejection_kernels.CUT_IN_FILTER`` is
   off): the cut-offs from the block sums and, inside the one
   block where a cumulative count or mass from the top crosses its limit, the bins' running
   sums (a bin is kept iff the count and mass strictly above it are under the limits: the
   sort's rule, ``rejection_kernels`` module docstring); the statistics ``M, THR, Z, AMAX, BAD``
   as ``rejection_kernels.filter_rows`` defines them.

The tail (top-p alone): a token ``D = T ln(2V / (1 - top_p))`` or more below the row's max ``m``
has weight ``exp((l - m) / T) < (1 - top_p) / (2V)``, so all of them together weigh less than
``(1 - top_p) / 2`` of the normaliser ``Z >= 1``, and the nucleus (the top mass reaching
``top_p Z``) ends above them with a margin of ``(1 - top_p) Z / 2``: they can be left out of the
histogram. Their weights still count in ``Z`` (each chunk's sum, added in chunk order by the cut
kernel). A real model's logits put most of a 49k vocabulary more than ``D`` (~10 logits at T 0.7,
top-p 0.9) below the max, so most of the histogram's atomics go: at bs 8 its 2.4M atomics (48
rows x 49k), ~40 us on the H100 with one launch for max and histogram, were the largest launch of
the sampled cycle. Above ``TAIL_P_MAX`` (a margin near rounding) every token is counted, and
with top-k the top-p bound gives way to the top-k floor (the k-th value may lie below ``m - D``,
and the count limit needs every token above it).

Numerics: masses are float32 sums of ``count * p(v)`` in bin order (the one-program filter adds
``p`` token by token in vocabulary order): rows whose cumulative mass sits within rounding of
``top_p`` may keep another set, as the module docstring of ``rejection_kernels`` allows. A min-p
cut-off is the lowest bin with ``v / T >= x_max + log(min_p)`` whether or not a token holds it
(the kept set is the same). Rows of other values (float32 or float16 targets) must take the
one-program filter: their low mantissa bits would be lost here.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import pdl_enter, pdl_opts

NBINS = 65536
_BB = 2048  # bins per block (launch 2) and per in-block scan (launch 3)
_NB = NBINS // _BB
_CHUNK = 4096  # tokens per program of launch 1
_IDX = 2**31 - 1
#: Largest top_p whose tail is left out of the histogram: the nucleus's margin over the tail,
#: (1 - top_p) / 2 of Z, stays far above float32 rounding of the sums (~1e-6 of Z).
TAIL_P_MAX = 0.999
#: Top-k rows: each group of GROUP tokens adds its max to a row's counts over NCOARSE coarse bins
#: (a bin's top bits, SHIFT fewer: half a binade each), from which a floor under the k-th largest
#: value follows (``topk_floor``).
GROUP = 64
NCOARSE = 1024
SHIFT = 6
#: Registers a thread of ``_max_kernel`` may take: its top-k branch would take it to 77 (sm_90,
#: no spills at 64), three blocks of 256 threads an SM instead of four for every row, top-k or not.
MAX_REGS = 64


@triton.jit
def _bin_of(x):
    """bf16-valued float32 -> its bin in value order (-0.0 as +0.0; no NaN here)."""
    bits = tl.where(x == 0.0, 0, x.to(tl.int32, bitcast=True)) >> 16
    return tl.where(bits < 0, bits ^ 0x7FFF, bits) + 32768


@triton.jit
def _value_of(b):
    """The float32 value of bin ``b`` (inverse of ``_bin_of``)."""
    k = b - 32768
    bits = tl.where(k < 0, k ^ 0x7FFF, k) << 16
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def store_stats(Out, m, thr, z, amax, bad):
    """One row's statistics, in ``rejection_kernels``'s column order (M, THR, Z, AMAX, BAD)."""
    tl.store(Out + 0, m)
    tl.store(Out + 1, thr)
    tl.store(Out + 2, z)
    tl.store(Out + 3, amax.to(tl.float32))
    tl.store(Out + 4, bad.to(tl.float32))


@triton.jit
def needs_cut(Temp, s_temp, TopK, s_top_k, TopP, s_top_p, req, V, greedy_below):
    """Whether request ``req``'s rows need a top-k or top-p cut-off (sampled, a filter on): the
    rows this module's kernels describe; the others (greedy, temperature and min-p only) the
    one-program filter, whose one pass is cheaper there. Parameters only: both sides agree."""
    temp = tl.load(Temp + req * s_temp).to(tl.float32)
    top_k = tl.load(TopK + req * s_top_k)
    top_p = tl.load(TopP + req * s_top_p).to(tl.float32)
    return (temp >= greedy_below) & (((top_k > 0) & (top_k < V)) | (top_p < 1.0))


@triton.jit
def _row_values(Logits, stride_row, row, chunk, V, CHUNK: tl.constexpr):
    """A chunk of a row as float32: (offsets, values, inside the row, finite, NaN / +inf)."""
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    inside = offs < V
    x = tl.load(Logits + row * stride_row + offs, mask=inside, other=float("-inf")).to(tl.float32)
    nan = x != x
    bad = nan | (x == float("inf"))
    fin = inside & (nan == 0) & (x > float("-inf"))
    return offs, x, inside, fin, bad


@triton.jit
def _max_kernel(Logits, stride_row, Hist, Acc, Coarse, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, ndt, greedy_below,
                V, CHUNK: tl.constexpr, NBINS: tl.constexpr, ZB: tl.constexpr, IDX: tl.constexpr, GROUP: tl.constexpr,
                NCOARSE: tl.constexpr, SHIFT: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    if not needs_cut(Temp, s_temp, TopK, s_top_k, TopP, s_top_p, row // ndt, V, greedy_below):
        return
    # this program's share of the row's bins zeroed for launch 2 (no memset launch before it)
    zb = chunk * ZB + tl.arange(0, ZB)
    tl.store(Hist + row * NBINS + zb, tl.zeros([ZB], tl.int32), mask=zb < NBINS)
    offs, x, inside, fin, bad = _row_values(Logits, stride_row, row, chunk, V, CHUNK)
    ok = fin & (bad == 0)
    b = _bin_of(tl.where(ok, x, 0.0))
    best = tl.max(tl.where(ok, b, -1), axis=0)
    first = tl.min(tl.where(ok & (b == best), offs, IDX), axis=0)
    packed = ((best + 1).to(tl.int64) << 32) | (IDX - first).to(tl.int64)
    tl.atomic_max(Acc + row * 4, tl.where(best >= 0, packed, 0), sem="relaxed")
    tl.atomic_add(Acc + row * 4 + 1, tl.sum(fin.to(tl.int64), axis=0), sem="relaxed")
    tl.atomic_add(Acc + row * 4 + 2, tl.sum((inside & bad).to(tl.int64), axis=0), sem="relaxed")
    top_k = tl.load(TopK + (row // ndt) * s_top_k)
    if (top_k > 0) & (top_k < V):  # each group's max, counted in its coarse bin (topk_floor)
        # the chunk read again (from L2) as [groups, GROUP]: a reshape of the tile above would
        # hold it through a layout change (64 -> 93 registers a thread, and the launch's occupancy
        # with them, for every row, top-k or not)
        goffs = chunk * CHUNK + tl.arange(0, CHUNK // GROUP)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
        xg = tl.load(Logits + row * stride_row + goffs, mask=goffs < V, other=float("-inf")).to(tl.float32)
        okg = (xg == xg) & (xg > float("-inf")) & (xg < float("inf"))
        gb = tl.max(tl.where(okg, _bin_of(tl.where(okg, xg, 0.0)), -1), axis=1)
        tl.atomic_add(Coarse + row * NCOARSE + (gb >> SHIFT), tl.full([CHUNK // GROUP], 1, tl.int32), mask=gb >= 0,
                      sem="relaxed")


@triton.jit
def topk_floor(Coarse, row, TopK, s_top_k, req, V, NCOARSE: tl.constexpr, SHIFT: tl.constexpr):
    """A top-k row's floor bin: the lowest bin of the highest coarse bin that holds, with the
    coarse bins above it, k group maxima. Those are k distinct tokens at or above the floor, so the
    k-th largest value is too, and the top-k set (hence its mass, and every cut-off at or above
    the k-th value) lies in the bins from the floor up. 0 (every bin) without top-k, or with fewer
    than k groups holding a finite token."""
    top_k = tl.load(TopK + req * s_top_k)
    floor = tl.full([], 0, tl.int32)
    if (top_k > 0) & (top_k < V):
        j = tl.arange(0, NCOARSE)
        cum = tl.cumsum(tl.load(Coarse + row * NCOARSE + NCOARSE - 1 - j), axis=0)  # from the top
        first = tl.min(tl.where(cum >= top_k, j, NCOARSE), axis=0)
        floor = tl.where(first < NCOARSE, (NCOARSE - 1 - first) << SHIFT, 0)
    return floor


@triton.jit
def tail_bound(Temp, s_temp, TopK, s_top_k, TopP, s_top_p, req, V, greedy_below, TAIL_P_MAX: tl.constexpr):
    """(D, c): tokens ``D`` or more below the row's max may be left out of the histogram (a top-p
    cut-off alone, top_p <= TAIL_P_MAX; the module docstring), else D = +inf."""
    temp, greedy, c = temperature_scale(Temp, s_temp, req, greedy_below)
    top_k = tl.load(TopK + req * s_top_k)
    top_p = tl.load(TopP + req * s_top_p).to(tl.float32)
    on = (greedy == 0) & ((top_k <= 0) | (top_k >= V)) & (top_p < 1.0) & (top_p <= TAIL_P_MAX)
    d = tl.log2(2.0 * V / tl.maximum(1.0 - top_p, 1e-6)) / c  # (l - m) c < -log2(2V / (1 - p))
    return tl.where(on, d, float("inf")), c


@triton.jit
def _hist_kernel(Logits, stride_row, Hist, Acc, Coarse, Tail, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, ndt,
                 greedy_below, V, CHUNK: tl.constexpr, NCH: tl.constexpr, NBINS: tl.constexpr,
                 TAIL_P_MAX: tl.constexpr, NCOARSE: tl.constexpr, SHIFT: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    if not needs_cut(Temp, s_temp, TopK, s_top_k, TopP, s_top_p, row // ndt, V, greedy_below):
        return
    _, x, _, fin, bad = _row_values(Logits, stride_row, row, chunk, V, CHUNK)
    ok = fin & (bad == 0)
    m, _, _ = _row_max(Acc, row)
    d, c = tail_bound(Temp, s_temp, TopK, s_top_k, TopP, s_top_p, row // ndt, V, greedy_below, TAIL_P_MAX)
    floor = topk_floor(Coarse, row, TopK, s_top_k, row // ndt, V, NCOARSE, SHIFT)
    b = _bin_of(tl.where(ok, x, 0.0))
    counted = ok & (x > m - d) & (b >= floor)
    tl.store(Tail + row * NCH + chunk, tl.sum(tl.where(ok & (counted == 0), tl.exp2((x - m) * c), 0.0), axis=0))
    tl.atomic_add(Hist + row * NBINS + b, tl.full([CHUNK], 1, tl.int32), mask=counted, sem="relaxed")


@triton.jit
def _row_max(Acc, row):
    """(max value, its first index, whether the row has a finite non-inf token): the unpacking
    of ``_hist_kernel``'s ``(bin + 1) << 32 | (IDX - index)``, IDX = 2**31 - 1."""
    packed = tl.load(Acc + row * 4)
    has = packed > 0
    b = (packed >> 32).to(tl.int32) - 1
    return tl.where(has, _value_of(b), float("-inf")), (0x7FFFFFFF - (packed & 0x7FFFFFFF)).to(tl.int32), has


@triton.jit
def temperature_scale(Temp, s_temp, req, greedy_below):
    """Request ``req``'s (temperature, greedy, c): greedy below ``greedy_below`` (temperature
    read as 1 then), ``c = log2(e) / T`` so that ``exp((l - m) / T) = exp2((l - m) c)``."""
    temp = tl.load(Temp + req * s_temp).to(tl.float32)
    greedy = temp < greedy_below
    temp = tl.where(greedy, 1.0, temp)
    return temp, greedy, tl.math.div_rn(1.4426950408889634, temp)


@triton.jit
def _bin_mass(cnt, bins, m, c):
    """``count * exp2((v - m) c)`` of each bin (0 where empty)."""
    return tl.where(cnt > 0, cnt.to(tl.float32) * tl.exp2((_value_of(bins) - m) * c), 0.0)


@triton.jit
def _block_kernel(Hist, Acc, Part, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, ndt, greedy_below, V,
                  NBINS: tl.constexpr, BB: tl.constexpr, NB: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    if not needs_cut(Temp, s_temp, TopK, s_top_k, TopP, s_top_p, row // ndt, V, greedy_below):
        return
    _, _, c = temperature_scale(Temp, s_temp, row // ndt, greedy_below)
    m, _, _ = _row_max(Acc, row)
    bins = blk * BB + tl.arange(0, BB)
    cnt = tl.load(Hist + row * NBINS + bins)
    mass = _bin_mass(cnt, bins, m, c)
    tl.store(Part + (row * NB + blk) * 2, tl.sum(cnt, axis=0).to(tl.float32))
    tl.store(Part + (row * NB + blk) * 2 + 1, tl.sum(mass, axis=0))


@triton.jit
def _crossing(HistRow, PartRow, m, c, lim_c, lim_s, BB: tl.constexpr, NB: tl.constexpr):
    """The lowest bin kept under ``count(> bin) < lim_c`` and ``mass(> bin) < lim_s`` (the first
    bin from the top where a running sum including it reaches its limit) and the mass at or
    above it; bin -1 when no running sum reaches its limit (every token is kept)."""
    j = tl.arange(0, NB)
    top = NB - 1 - j  # blocks from the top
    pc = tl.load(PartRow + top * 2)
    ps = tl.load(PartRow + top * 2 + 1)
    cc = tl.cumsum(pc, axis=0)
    cs = tl.cumsum(ps, axis=0)
    hit = (cc >= lim_c) | (cs >= lim_s)
    first = tl.min(tl.where(hit, j, NB), axis=0)
    cut = -1
    z = 0.0
    if first < NB:
        before_c = tl.sum(tl.where(j < first, pc, 0.0), axis=0)
        before_s = tl.sum(tl.where(j < first, ps, 0.0), axis=0)
        blk = NB - 1 - first
        i = tl.arange(0, BB)
        bins = blk * BB + BB - 1 - i  # this block's bins from the top
        cnt = tl.load(HistRow + bins)
        mass = _bin_mass(cnt, bins, m, c)
        rc = before_c + tl.cumsum(cnt.to(tl.float32), axis=0)
        rs = before_s + tl.cumsum(mass, axis=0)
        hit_b = (cnt > 0) & ((rc >= lim_c) | (rs >= lim_s))
        at = tl.min(tl.where(hit_b, i, BB), axis=0)
        # the block sum crossed but the running sum, added in another order, did not: the
        # block's lowest present bin (a rounding-level difference)
        at = tl.where(at < BB, at, tl.max(tl.where(cnt > 0, i, -1), axis=0))
        cut = blk * BB + BB - 1 - at
        z = tl.sum(tl.where(i <= at, mass, 0.0), axis=0) + before_s
    return cut, z


@triton.jit
def _mass_from(HistRow, PartRow, b, m, c, BB: tl.constexpr, NB: tl.constexpr):
    """The mass of the bins >= ``b``."""
    j = tl.arange(0, NB)
    blk = b // BB
    above = tl.sum(tl.where(j > blk, tl.load(PartRow + j * 2 + 1), 0.0), axis=0)
    bins = blk * BB + tl.arange(0, BB)
    cnt = tl.load(HistRow + bins)
    mass = tl.where(bins >= b, _bin_mass(cnt, bins, m, c), 0.0)
    return above + tl.sum(mass, axis=0)


@triton.jit
def _cut_kernel(Hist, Acc, Part, Tail, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, MinP, s_min_p, Stats, ndt, V,
                greedy_below, NBINS: tl.constexpr, BB: tl.constexpr, NB: tl.constexpr, NS: tl.constexpr,
                NCH: tl.constexpr, NCH_P2: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    req = row // ndt
    if not needs_cut(Temp, s_temp, TopK, s_top_k, TopP, s_top_p, req, V, greedy_below):
        return
    cut_row(Hist, Acc, Part, Tail, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, MinP, s_min_p, Stats, row, req, V,
            greedy_below, NBINS, BB, NB, NS, NCH, NCH_P2)


@triton.jit
def cut_row(Hist, Acc, Part, Tail, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, MinP, s_min_p, Stats, row, req, V,
            greedy_below, NBINS: tl.constexpr, BB: tl.constexpr, NB: tl.constexpr, NS: tl.constexpr,
            NCH: tl.constexpr, NCH_P2: tl.constexpr):
    """Launch 4's work for row ``row`` of request ``req`` (one that ``needs_cut``): its statistics
    into ``Stats``. ``_cut_kernel`` runs it, or ``rejection_kernels._filter_kernel`` beside its
    own rows (``CUT``: one launch fewer)."""
    HistRow = Hist + row * NBINS
    PartRow = Part + row * NB * 2
    temp, greedy, c = temperature_scale(Temp, s_temp, req, greedy_below)
    m, amax, has = _row_max(Acc, row)
    n_fin = tl.load(Acc + row * 4 + 1)
    n_bad = tl.load(Acc + row * 4 + 2)
    z = tl.sum(tl.load(PartRow + tl.arange(0, NB) * 2 + 1), axis=0)
    # + the weights of the tokens left out of the histogram, summed per chunk in chunk order
    ch = tl.arange(0, NCH_P2)
    z += tl.sum(tl.load(Tail + row * NCH + ch, mask=ch < NCH, other=0.0), axis=0)
    bad = (n_bad > 0) | (has == 0)
    m_out = tl.where(bad, 0.0, m)
    z = tl.where(bad, V * 1.0, z)
    amax = tl.where(bad, 0, amax)
    top_k = tl.load(TopK + req * s_top_k)
    top_p = tl.load(TopP + req * s_top_p).to(tl.float32)
    min_p = tl.load(MinP + req * s_min_p).to(tl.float32)
    sampled = (greedy == 0) & (bad == 0)
    k_on = sampled & (top_k > 0) & (top_k < n_fin)
    p_on = sampled & (top_p < 1.0)
    thr_bin = -1
    z_keep = z
    if k_on:
        thr_bin, z_keep = _crossing(HistRow, PartRow, m, c, top_k.to(tl.float32), float("inf"), BB, NB)
    if p_on:
        pb, pz = _crossing(HistRow, PartRow, m, c, float("inf"), top_p * z_keep, BB, NB)
        if pb > thr_bin:
            thr_bin = pb
            z_keep = pz
    thr = tl.where(thr_bin >= 0, _value_of(tl.maximum(thr_bin, 0)), float("-inf"))
    # min-p on x = l / T as the sampler decides it: the lowest bin with v / T >= cut (a bisection
    # over bins: x is monotone in the bin)
    cut = tl.math.div_rn(m, temp) + tl.log(min_p)
    if sampled & (tl.math.div_rn(thr, temp) < cut):
        lo = _bin_of(m) * 0  # bins below lo fail, hi passes (the max passes)
        hi = _bin_of(m)
        for _ in range(17):
            mid = (lo + hi) // 2
            if tl.math.div_rn(_value_of(mid), temp) >= cut:
                hi = mid
            else:
                lo = mid + 1
        l_cut = _value_of(hi)
        if l_cut > thr:
            thr = l_cut
            z_keep = _mass_from(HistRow, PartRow, hi, m, c, BB, NB)
    store_stats(Stats + row * NS, m_out, thr, z_keep, amax, bad)


class Histogram(NamedTuple):
    """Launches 1-2's output for ``rows`` rows: ``hist`` [rows, NBINS] int32 counts, ``acc`` [rows,
    4] int64 (packed max, finite count, NaN / +inf count), ``coarse`` [rows, NCOARSE] int32 (a
    top-k row's group maxima per coarse bin), ``tail`` [rows, chunks] float32 (per chunk, the
    weights ``exp((l - m) / T)`` of its tokens left out)."""

    hist: torch.Tensor
    acc: torch.Tensor
    coarse: torch.Tensor
    tail: torch.Tensor


def histogram(logits: torch.Tensor, ndt: int, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
              greedy_below: float) -> Histogram:
    """Launches 1-2 (``_max_kernel``, ``_hist_kernel``) over the rows that ``needs_cut``."""
    rows, vocab = logits.shape
    dev = logits.device
    nch = triton.cdiv(vocab, _CHUNK)
    # hist: 256 KB a row, zeroed by launch 1 (a cut row's); acc and coarse: one zeroed buffer (one
    # memset); tail: every chunk of a cut row writes its sum
    counters = torch.zeros(rows * (8 + NCOARSE), dtype=torch.int32, device=dev)
    h = Histogram(torch.empty((rows, NBINS), dtype=torch.int32, device=dev),
                  counters[: rows * 8].view(torch.int64).view(rows, 4),
                  counters[rows * 8:].view(rows, NCOARSE),
                  torch.empty((rows, nch), dtype=torch.float32, device=dev))
    sel = (temperature, temperature.stride(0), top_k, top_k.stride(0), top_p, top_p.stride(0), ndt, greedy_below, vocab)
    _max_kernel[(rows, nch)](logits, logits.stride(0), h.hist, h.acc, h.coarse, *sel, CHUNK=_CHUNK, NBINS=NBINS,
                             ZB=triton.next_power_of_2(triton.cdiv(NBINS, nch)), IDX=_IDX, GROUP=GROUP,
                             NCOARSE=NCOARSE, SHIFT=SHIFT, num_warps=8, maxnreg=MAX_REGS, **pdl_opts(dev, "sampling"))
    _hist_kernel[(rows, nch)](logits, logits.stride(0), h.hist, h.acc, h.coarse, h.tail, *sel, CHUNK=_CHUNK, NCH=nch,
                              NBINS=NBINS, TAIL_P_MAX=TAIL_P_MAX, NCOARSE=NCOARSE, SHIFT=SHIFT, num_warps=8,
                              **pdl_opts(dev, "sampling"))
    return h


class Described(NamedTuple):
    """Launches 1-3's output (``Histogram``'s and ``part`` [rows, NB, 2] float32: each block's count
    and mass), what ``cut_row`` reads."""

    hist: Histogram
    part: torch.Tensor

    def cut_args(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(Hist, Acc, Part, Tail) as ``cut_row`` takes them."""
        return self.hist.hist, self.hist.acc, self.part, self.hist.tail

    def cut_consts(self) -> dict[str, int]:
        """``cut_row``'s constexprs."""
        nch = self.hist.tail.shape[1]
        return dict(NBINS=NBINS, BB=_BB, NB=_NB, NCH=nch, NCH_P2=triton.next_power_of_2(nch))

    @staticmethod
    def absent(like: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], dict[str, int]]:
        """``cut_args`` and ``cut_consts`` for a launch that runs no cut-off: ``like``'s pointer
        in each place (never read), constexprs of one."""
        return (like,) * 4, dict(NBINS=1, BB=1, NB=1, NCH=1, NCH_P2=1)


def describe(logits: torch.Tensor, ndt: int, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
             greedy_below: float) -> Described:
    """Launches 1-3 over the rows that ``needs_cut``: what launch 4 (``cut_row``) needs."""
    rows, vocab = logits.shape
    h = histogram(logits, ndt, temperature, top_k, top_p, greedy_below)
    part = torch.empty((rows, _NB, 2), dtype=torch.float32, device=logits.device)
    sel = (temperature, temperature.stride(0), top_k, top_k.stride(0), top_p, top_p.stride(0), ndt, greedy_below, vocab)
    _block_kernel[(rows, _NB)](h.hist, h.acc, part, *sel, NBINS=NBINS, BB=_BB, NB=_NB, num_warps=4,
                               **pdl_opts(logits.device, "sampling"))
    return Described(h, part)


def filter_rows_bf16(logits: torch.Tensor, ndt: int, temperature: torch.Tensor, top_k: torch.Tensor,
                     top_p: torch.Tensor, min_p: torch.Tensor, greedy_below: float, stats: torch.Tensor) -> None:
    """``rejection_kernels.filter_rows``'s statistics, into ``stats`` [R, NS], for the rows of
    bf16 values that ``needs_cut`` (see the module docstring; the other rows are left alone): the
    four launches."""
    rows, vocab = logits.shape
    if rows == 0:
        return
    d = describe(logits, ndt, temperature, top_k, top_p, greedy_below)
    _cut_kernel[(rows,)](*d.cut_args(), temperature, temperature.stride(0), top_k, top_k.stride(0), top_p,
                         top_p.stride(0), min_p, min_p.stride(0), stats, ndt, vocab, greedy_below, NS=stats.shape[1],
                         **d.cut_consts(), num_warps=8, **pdl_opts(logits.device, "sampling"))

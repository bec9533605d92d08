"""Triton kernels for the sampled acceptance of the fused speculative iteration: two launches
instead of the target's dense filtered distribution (a full-vocabulary sort per verify row) and
the ~100 small kernels of the dense rejection step (``sampled_accept_reference``).

``filter_rows`` (one program per verify row) describes the target's filtered distribution, the
one ``Sampler.probs`` returns, without sorting the vocabulary: per row the largest logit ``M``, a
logit threshold ``THR`` and the normaliser ``Z`` (the sum of ``exp((l - M) / T)`` over the kept
tokens), so that ``p(t) = [l_t >= THR] exp((l_t - M) / T) / Z``; greedy rows keep their argmax
``AMAX`` (one-hot, the first index of the max); ``BAD`` rows (NaN / +inf / nothing finite) read as
all-zero logits (uniform), as the sampler does. The filters are the sampler's, in its order:
top-k, then top-p on the top-k renormalised distribution, then min-p relative to the max, ties
kept at every cut-off. ``x = l / T`` is monotone in ``l``, so order and ties are the same in
either space; each cut-off is the sort's:

* top-k keeps ``x >= kth``, the k-th largest value;
* top-p keeps ``x >= v``, the value at the last sorted position whose mass before it
  (``cumsum - p``) is ``< top_p``: the smallest present value ``t`` whose first sorted position
  is kept, i.e. with ``mass(x > t) < top_p * Z_k`` (top-k likewise: ``count(x > t) < k``);
* min-p keeps ``x >= x_max + log(min_p)``, decided on ``x`` in float32 as the sampler does.

The top-k and top-p predicates are monotone in ``t``: a bracket ``(lo, hi]`` around the cut-off
is narrowed by passes over the row that count and sum above a probe (the first probe is the
logit above which at most ``PROBE_CAP`` tokens can lie, ``p >= 1 / PROBE_CAP``; a typical
nucleus sits inside it), each pass also compacting the tokens above its probe into a scratch
tile, until at most ``TILE`` tokens remain in the bracket; the cut-off is then found among them
by a pairwise comparison (no sort). Typical rows take two passes (statistics, one probe).

``rejection_sample`` (``updraft.spec.accept_kernel``) then walks the drafts against those
statistics and draws the correction or bonus token.

Numerics: float32 like the sampler. Masses are summed in another order than the sampler's
``cumsum``, so a row whose cumulative mass sits within float32 rounding of ``top_p`` (or a token
within rounding of the min-p cut-off) may keep a different set; the kernels' own distribution
is then still a valid one and the acceptance uses it consistently. Two distinct logits whose
``l / T`` round to the same float32 are one tie group for the sampler and two values here.

A bf16 target's rows with a top-k or top-p cut-off (``bf16_values``, at most ``HIST_MAX_ROWS``
rows) go to ``filter_hist`` instead: its values are bf16, so a histogram over the 65536 of them
describes each row exactly and many programs build it (the bracket search is serial, one program
per row); this kernel reads the histogram's block sums for those rows and runs its cut-off
(``filter_hist.cut_row``, ``CUT_IN_FILTER``) in place of its own search.

Dispatch: ``sampled_accept`` runs the kernels on CUDA tensors, and on CPU tensors under the
Triton interpreter when ``INTERPRET`` is set (tests); otherwise ``sampled_accept_reference``
(the dense path: ``Sampler.probs``, a dense q, ``rejection_accept``), which CPU engine runs keep.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import pdl_enter, pdl_opts
from updraft.runtime.sampler import GREEDY_TEMPERATURE, Sampler, SamplingBatch
from updraft.spec import device_rng, filter_hist
from updraft.spec.accept_kernel import rejection_sample
from updraft.spec.last_row import LastRowPick
from updraft.spec.sampling_kernels import interpreter_on
from updraft.spec.verify import rejection_accept

#: Columns of the per-row statistics ``filter_rows`` returns ([rows, NUM_STATS] float32).
M, THR, Z, AMAX, BAD = range(5)
NUM_STATS = 5

#: Tokens a compacted bracket holds (solved by a [_CHUNK, TILE] comparison per chunk).
TILE = 256
_CHUNK = 64
#: The first probe's bound on the tokens above it (Markov: at most this many have
#: ``p >= 1 / PROBE_CAP``; on SmolLM2 at T 0.7 at most 129 did, and the nucleus was inside).
PROBE_CAP = 2048
#: Value-space bisection steps before the bracket search switches to halving float bit patterns
#: (at most 32 more steps to a bracket holding one value).
_KEY_AFTER = 24
#: Block and warps of the filter kernel (one program per verify row). A pass is latency-bound
#: (one memory round trip per block); at 4096 the kernel spilled (255 registers) and a sampled
#: S = 5 cycle spent ~260 us in it; 2048 x 8 warps keeps 225 registers and no spills
#: (benchmarks/results/2026-11-25-h100-filter).
_BLOCK = 2048
_WARPS = 8
#: Most rows ``filter_hist`` takes (bf16 values): up to bs 10 at S = 5. Its zeroed bins cost 256 KB
#: a row; on the H100 (benchmarks/filter_hist_bench.py, 2026-11-26) at 384 rows its launches took
#: 350 / 790 us (49k / 128k vocabulary) whatever the filter, the one-program filter 500 / 1800 us
#: with top-p and 73 / 244 without a cut-off.
HIST_MAX_ROWS = 64
#: Whether the filter launch (one program a row) also runs ``filter_hist``'s fourth launch for the
#: rows that ``needs_cut`` (``filter_hist.cut_row``), where it returned at once on them after
#: ``filter_hist._cut_kernel`` had: one launch of the sampled verify's chain fewer (False keeps the
#: two launches; ``benchmarks/cycle_variants.py`` knob ``cut_launch``).
CUT_IN_FILTER = True
#: Run the kernels in the Triton interpreter too (tests set it). Interpreted, a verify row
#: costs ~50 ms (each reduction is a Python call), so CPU engine runs keep the dense path.
INTERPRET = False


def use_kernels(t: torch.Tensor) -> bool:
    """Whether ``sampled_accept`` runs the kernels for tensors on ``t``'s device."""
    return t.is_cuda or (INTERPRET and interpreter_on())


# ---- passes over a row ---------------------------------------------------------------------
# Rows are read as raw logits l (float32; -inf past the row): x = l / T is monotone in l, so
# order, ties and every cut-off are the same in either space, and exp(x - x_max) =
# exp2((l - l_max) * log2(e) / T) needs no division per token.
@triton.jit
def _scan(Row, c, V: tl.constexpr, BLOCK: tl.constexpr):
    """One pass: max, first argmax, online sum of exp2((l - max) c), finite count and min, and
    the count of NaN / +inf logits. Per-lane accumulators, reduced once after the loop (one
    reduction per block: the running max the online sum needs)."""
    m = float("-inf")
    z = tl.zeros([BLOCK], dtype=tl.float32)
    best = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    best_at = tl.zeros([BLOCK], dtype=tl.int32)
    n_fin = tl.zeros([BLOCK], dtype=tl.int32)
    n_bad = tl.zeros([BLOCK], dtype=tl.int32)
    l_min = tl.full([BLOCK], float("inf"), dtype=tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(Row + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        nan = x != x
        n_bad += (nan | (x == float("inf"))).to(tl.int32)
        x = tl.where(nan, float("-inf"), x)
        fin = x > float("-inf")
        n_fin += fin.to(tl.int32)
        l_min = tl.minimum(l_min, tl.where(fin, x, float("inf")))
        better = x > best  # strict: each lane keeps its first index of its max
        best = tl.where(better, x, best)
        best_at = tl.where(better, offs, best_at)
        new_m = tl.maximum(m, tl.max(x, axis=0))
        scale = tl.where(new_m == m, 1.0, tl.exp2((m - new_m) * c))
        z = z * scale + tl.where(fin, tl.exp2((x - new_m) * c), 0.0)
        m = new_m
    amax = tl.min(tl.where(best == m, best_at, V), axis=0)  # the first index of the max
    return (m, tl.sum(z, axis=0), amax, tl.sum(n_fin, axis=0), tl.sum(n_bad, axis=0),
            tl.min(l_min, axis=0))


@triton.jit
def _probe(Row, Tile, m, c, lo, mid, hi, V: tl.constexpr, BLOCK: tl.constexpr,
           TILE: tl.constexpr):
    """One pass: count and mass of ``l > mid``, the largest ``l`` in ``(lo, mid]``, the smallest
    in ``(mid, hi]``, and the tokens of ``(mid, hi]`` compacted into ``Tile`` (the first TILE).
    Per-lane accumulators; one reduction per block (the compaction's count)."""
    cnt = tl.zeros([BLOCK], dtype=tl.int32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    mx_lo = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    mn_hi = tl.full([BLOCK], float("inf"), dtype=tl.float32)
    n_up = 0
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(Row + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        above = x > mid
        cnt += above.to(tl.int32)
        s += tl.where(above, tl.exp2((x - m) * c), 0.0)
        mx_lo = tl.maximum(mx_lo, tl.where((x > lo) & (x <= mid), x, float("-inf")))
        up = above & (x <= hi)
        mn_hi = tl.minimum(mn_hi, tl.where(up, x, float("inf")))
        n_blk = tl.sum(up.to(tl.int32), axis=0)
        if (n_blk > 0) & (n_up < TILE):
            pos = n_up + tl.cumsum(up.to(tl.int32), axis=0) - 1
            tl.store(Tile + pos, x, mask=up & (pos < TILE))
        n_up += n_blk
    return (tl.sum(cnt, axis=0), tl.sum(s, axis=0), tl.max(mx_lo, axis=0),
            tl.min(mn_hi, axis=0), n_up)


@triton.jit
def _compact(Row, Tile, lo, hi, V: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr):
    """One pass: the tokens of ``(lo, hi]`` into ``Tile`` (the first TILE of them)."""
    n = 0
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(Row + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        sel = (x > lo) & (x <= hi)
        n_blk = tl.sum(sel.to(tl.int32), axis=0)
        if (n_blk > 0) & (n < TILE):
            pos = n + tl.cumsum(sel.to(tl.int32), axis=0) - 1
            tl.store(Tile + pos, x, mask=sel & (pos < TILE))
        n += n_blk


@triton.jit
def _min_p_cut(Row, m, c, temp, cut, V: tl.constexpr, BLOCK: tl.constexpr):
    """One pass for min-p, decided on ``x = l / T`` exactly as the sampler does (``x >= cut``):
    the smallest kept logit and the mass of the kept tokens."""
    s = tl.zeros([BLOCK], dtype=tl.float32)
    l_cut = tl.full([BLOCK], float("inf"), dtype=tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(Row + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        kept = tl.math.div_rn(x, temp) >= cut
        s += tl.where(kept, tl.exp2((x - m) * c), 0.0)
        l_cut = tl.minimum(l_cut, tl.where(kept, x, float("inf")))
    return tl.min(l_cut, axis=0), tl.sum(s, axis=0)


@triton.jit
def _key(x):
    """Float32 -> int32 whose order is the floats' order (no NaN here)."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _midpoint(lo, hi, probe, it, KEY_AFTER: tl.constexpr):
    """The next probe in ``(lo, hi)``: ``probe`` if inside, else the value midpoint, or after
    KEY_AFTER steps the bit-pattern midpoint (<= 32 more steps to adjacent floats)."""
    kmid = ((_key(lo).to(tl.int64) + _key(hi).to(tl.int64)) >> 1).to(tl.int32)
    by_key = tl.where(kmid < 0, kmid ^ 0x7FFFFFFF, kmid).to(tl.float32, bitcast=True)
    mid = tl.where(it < KEY_AFTER, lo * 0.5 + hi * 0.5, by_key)
    return tl.where((probe > lo) & (probe < hi), probe, mid)


# ---- the bracket search ----------------------------------------------------------------------
@triton.jit
def _narrow(Row, Tile, m, c, lo, hi, c_lo, s_lo, c_hi, s_hi, lim_c, lim_s, first,
            V: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr, KEY_AFTER: tl.constexpr):
    """Narrow ``(lo, hi]`` around the smallest present ``t`` with ``count(l > t) < lim_c`` and
    ``mass(l > t) < lim_s`` until it holds at most TILE tokens or one value.

    Invariants: the predicate fails at ``lo`` and holds at ``hi``, ``hi`` is a present value,
    ``c_* / s_*`` are count / mass of ``l > *``. Returns the bracket, whether ``Tile`` already
    holds its tokens (``tiled``), and whether ``hi`` is its only value (``single``)."""
    tiled = c_lo < 0
    single = c_lo < 0
    go = tl.where(c_lo - c_hi > TILE, 1, 0)
    it = 0
    probe = first
    while go > 0:
        mid = _midpoint(lo, hi, probe, it, KEY_AFTER)
        if (mid <= lo) | (mid >= hi):  # adjacent floats: hi is the bracket's only value
            single = c_lo >= 0
            go = 0
        else:
            cnt, s, mx_lo, mn_hi, n_up = _probe(Row, Tile, m, c, lo, mid, hi, V, BLOCK, TILE)
            # Holds at mid: the target is <= the largest l <= mid. (lo, mid] is never empty then
            # unless lo's mass came from another pass's rounding (the first bracket's): read
            # that as failing, which only keeps the bracket wider.
            if (cnt < lim_c) & (s < lim_s) & (mx_lo > lo):
                hi = mx_lo
                c_hi = cnt
                s_hi = s
                tiled = c_lo < 0
            else:
                lo = mid
                c_lo = cnt
                s_lo = s
                single = mn_hi == hi
                tiled = n_up <= TILE
            go = tl.where(single | (c_lo - c_hi <= TILE), 0, 1)
        probe = float("-inf")
        it += 1
    return lo, hi, c_lo, s_lo, c_hi, s_hi, tiled, single


@triton.jit
def _solve(Tile, n, m, c, c_hi, s_hi, lim_c, lim_s, floor, TILE: tl.constexpr,
           CHUNK: tl.constexpr):
    """The cut-off inside a compacted bracket of ``n`` tokens and the mass of ``l >= cut-off``
    (tokens below ``floor`` are out), as the sampler's sort would find it, without a sort: the
    sort's cut-off is the smallest value whose FIRST sorted position is kept, and that
    position's count and mass before it are those of the strictly larger values (``c_hi`` /
    ``s_hi`` above the bracket, plus a [CHUNK, TILE] comparison per chunk of the tile)."""
    j = tl.arange(0, TILE)
    v = tl.load(Tile + j, mask=j < n, other=float("-inf"))
    ok = (j < n) & (v >= floor)
    e = tl.where(ok, tl.exp2((v - m) * c), 0.0)
    t = float("inf")
    for i0 in range(0, n, CHUNK):
        i = i0 + tl.arange(0, CHUNK)
        vi = tl.load(Tile + i, mask=i < n, other=float("-inf"))
        larger = ok[None, :] & (v[None, :] > vi[:, None])  # [i, j]: v_j > v_i
        count = tl.sum(larger.to(tl.int32), axis=1)
        mass = tl.sum(tl.where(larger, e[None, :], 0.0), axis=1)
        keep = (i < n) & (vi >= floor) & ((c_hi + count) < lim_c) & ((s_hi + mass) < lim_s)
        t = tl.minimum(t, tl.min(tl.where(keep, vi, float("inf")), axis=0))  # the max is kept
    return t, s_hi + tl.sum(tl.where(ok & (v >= t), e, 0.0), axis=0)


@triton.jit
def _resolve(Row, Tile, m, c, lo, hi, c_lo, s_lo, c_hi, s_hi, tiled, single, lim_c, lim_s,
             floor, V: tl.constexpr, BLOCK: tl.constexpr, TILE: tl.constexpr,
             CHUNK: tl.constexpr):
    """The cut-off and the mass at or above it, from a narrowed bracket."""
    t = hi
    z = s_lo  # a one-value bracket: mass(l >= hi) = mass(l > lo)
    if single == 0:
        if tiled == 0:
            _compact(Row, Tile, lo, hi, V, BLOCK, TILE)
        tl.debug_barrier()  # the tile was written by other threads of this program
        t, z = _solve(Tile, c_lo - c_hi, m, c, c_hi, s_hi, lim_c, lim_s, floor, TILE, CHUNK)
        tl.debug_barrier()  # read by all before a later search overwrites it
    return t, z


# ---- kernel 1: the filtered distribution per verify row --------------------------------------
@triton.jit(do_not_specialize=["ndt"])  # one compiled kernel for every S (ndt = 1 included)
def _filter_kernel(Logits, stride_row, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, MinP, s_min_p,
                   Stats, Tiles, ndt, greedy_below, log_cap, Hist, Acc, Part, Tail, V: tl.constexpr,
                   BLOCK: tl.constexpr, TILE: tl.constexpr, CHUNK: tl.constexpr, KEY_AFTER: tl.constexpr,
                   NS: tl.constexpr, SKIP_CUTS: tl.constexpr, CUT: tl.constexpr, NBINS: tl.constexpr,
                   BB: tl.constexpr, NB: tl.constexpr, NCH: tl.constexpr, NCH_P2: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    req = row // ndt
    if SKIP_CUTS:  # filter_hist describes the rows with a top-k / top-p cut-off
        if filter_hist.needs_cut(Temp, s_temp, TopK, s_top_k, TopP, s_top_p, req, V, greedy_below):
            if CUT:  # its last launch's work, here (Hist, Acc, Part, Tail: filter_hist.describe's)
                filter_hist.cut_row(Hist, Acc, Part, Tail, Temp, s_temp, TopK, s_top_k, TopP, s_top_p, MinP, s_min_p,
                                    Stats, row, req, V, greedy_below, NBINS, BB, NB, NS, NCH, NCH_P2)
            return
    Row = Logits + row * stride_row
    Tile = Tiles + row * TILE
    temp, greedy, c = filter_hist.temperature_scale(Temp, s_temp, req, greedy_below)
    m, z, amax, n_fin, n_bad, l_min = _scan(Row, c, V, BLOCK)
    bad = (n_bad > 0) | (m == float("-inf"))  # the sampler zeroes such rows: uniform
    m = tl.where(bad, 0.0, m)
    z = tl.where(bad, V * 1.0, z)
    amax = tl.where(bad, 0, amax)
    top_k = tl.load(TopK + req * s_top_k)  # any dtype (RowState's is float32): compared only
    top_p = tl.load(TopP + req * s_top_p).to(tl.float32)
    min_p = tl.load(MinP + req * s_min_p).to(tl.float32)
    sampled = (greedy == 0) & (bad == 0)
    k_on = sampled & (top_k > 0) & (top_k < n_fin)  # else every finite l is kept
    p_on = sampled & (top_p < 1.0)
    lo0 = l_min - 1.0 - tl.abs(l_min) * 1e-6  # below every finite l
    first = m + (tl.log2(z) - log_cap) / c  # at most 2**log_cap tokens lie above it
    big = n_fin + 1
    thr = float("-inf")
    z_keep = z
    # top-k: the bracket (lo0, m] (count(l > lo0) = n_fin, mass z) around the k-th largest
    k_lo, k_hi, k_clo, k_slo, k_chi, k_shi = lo0, m, n_fin, z, n_fin * 0, z * 0.0
    k_single = n_fin < 0
    if k_on:
        k_lo, k_hi, k_clo, k_slo, k_chi, k_shi, k_tiled, k_single = _narrow(
            Row, Tile, m, c, k_lo, k_hi, k_clo, k_slo, k_chi, k_shi, top_k, float("inf"), first,
            V, BLOCK, TILE, KEY_AFTER)
        thr, z_keep = _resolve(Row, Tile, m, c, k_lo, k_hi, k_clo, k_slo, k_chi, k_shi, k_tiled,
                               k_single, top_k, float("inf"), float("-inf"), V, BLOCK, TILE,
                               CHUNK)
    if p_on:
        lim_s = top_p * z_keep  # top-p on the top-k renormalised distribution
        if k_on & (k_shi < lim_s):  # inside top-k's final bracket, whose tile is still there
            thr, z_keep = _resolve(Row, Tile, m, c, k_lo, k_hi, k_clo, k_slo, k_chi, k_shi,
                                   k_clo >= 0, k_single, big, lim_s, thr, V, BLOCK, TILE, CHUNK)
        else:  # above it (top-k on), or anywhere (off): (k_hi, m], resp. (lo0, m]
            p_lo = tl.where(k_on, k_hi, lo0)
            p_clo = tl.where(k_on, k_chi, n_fin)
            p_slo = tl.where(k_on, k_shi, z)
            p_lo, p_hi, p_clo, p_slo, p_chi, p_shi, p_tiled, p_single = _narrow(
                Row, Tile, m, c, p_lo, m, p_clo, p_slo, n_fin * 0, z * 0.0, big, lim_s, first, V, BLOCK,
                TILE, KEY_AFTER)
            thr, z_keep = _resolve(Row, Tile, m, c, p_lo, p_hi, p_clo, p_slo, p_chi, p_shi,
                                   p_tiled, p_single, big, lim_s, float("-inf"), V, BLOCK, TILE,
                                   CHUNK)
    # min-p, on x = l / T like the sampler: x >= x_max + log(min_p) (0: -inf, off)
    cut = tl.math.div_rn(m, temp) + tl.log(min_p)
    if sampled & (tl.math.div_rn(thr, temp) < cut):
        l_cut, s_cut = _min_p_cut(Row, m, c, temp, cut, V, BLOCK)
        if l_cut > thr:
            thr = l_cut
            z_keep = s_cut
    filter_hist.store_stats(Stats + row * NS, m, thr, z_keep, amax, bad)


def filter_rows(logits: torch.Tensor, ndt: int, temperature: torch.Tensor, top_k: torch.Tensor,
                top_p: torch.Tensor, min_p: torch.Tensor, bf16_values: bool = False) -> torch.Tensor:
    """[R, NUM_STATS] float32 statistics (see the module docstring) of the target's filtered
    distribution for each row of ``logits`` [R, V] (any float dtype, unit stride along V); row
    ``r`` belongs to request ``r // ndt`` whose parameters are ``temperature`` / ``top_k`` /
    ``top_p`` / ``min_p`` [B] (raw: temperature below GREEDY_TEMPERATURE is greedy, top_k <= 0
    or >= V, top_p >= 1 and min_p = 0 are off; any strides, read in place; top_k of any dtype).
    ``bf16_values``: every logit is a bf16 value (a bf16 target's): the rows go to
    ``filter_hist`` (three launches spreading each row over many programs before this one, which
    reads their block sums: ``CUT_IN_FILTER``) instead of the one-program search."""
    rows, vocab = logits.shape
    assert logits.stride(1) == 1, "filter_rows: the vocabulary dimension must be contiguous"
    assert vocab < 2**24, "AMAX is stored as float32"
    stats = torch.empty((rows, NUM_STATS), dtype=torch.float32, device=logits.device)
    hist = bf16_values and rows <= HIST_MAX_ROWS
    cut = hist and CUT_IN_FILTER
    described = filter_hist.describe(logits, ndt, temperature, top_k, top_p, GREEDY_TEMPERATURE) if cut else None
    if hist and not cut:
        filter_hist.filter_rows_bf16(logits, ndt, temperature, top_k, top_p, min_p, GREEDY_TEMPERATURE, stats)
    tiles = torch.empty((rows, TILE), dtype=torch.float32, device=logits.device)
    cut_args, cut_consts = ((described.cut_args(), described.cut_consts()) if described is not None
                            else filter_hist.Described.absent(stats))
    _filter_kernel[(rows,)](
        logits, logits.stride(0), temperature, temperature.stride(0), top_k, top_k.stride(0), top_p,
        top_p.stride(0), min_p, min_p.stride(0), stats, tiles, ndt, GREEDY_TEMPERATURE, math.log2(PROBE_CAP),
        *cut_args, V=vocab, BLOCK=_BLOCK, TILE=TILE, CHUNK=_CHUNK, KEY_AFTER=_KEY_AFTER, NS=NUM_STATS, SKIP_CUTS=hist,
        CUT=cut, **cut_consts, num_warps=_WARPS, **pdl_opts(logits.device, "sampling"),
    )
    return stats


def probs_from_stats(logits: torch.Tensor, ndt: int, temperature: torch.Tensor,
                     stats: torch.Tensor) -> torch.Tensor:
    """[R, V] float32: the distribution ``stats`` describe, materialised (tests, debugging)."""
    temp = temperature.float().repeat_interleave(ndt)
    greedy = temp < GREEDY_TEMPERATURE
    c = math.log2(math.e) / torch.where(greedy, 1.0, temp)
    lg = torch.where(stats[:, BAD, None] > 0, 0.0, logits.float())
    p = torch.where(lg >= stats[:, THR, None], torch.exp2((lg - stats[:, M, None]) * c[:, None]), 0.0)
    p = p / stats[:, Z, None]
    one_hot = torch.zeros_like(p).scatter_(1, stats[:, AMAX].long()[:, None], 1.0)
    return torch.where(greedy[:, None], one_hot, p)


# ---- the whole acceptance --------------------------------------------------------------------
def sampled_accept(logits: torch.Tensor, drafts: torch.Tensor, cand: torch.Tensor, q: torch.Tensor,
                   temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   min_p: torch.Tensor, u_accept: torch.Tensor, u_residual: torch.Tensor,
                   bf16_values: bool = False, tickets: torch.Tensor | None = None,
                   emitted_out: torch.Tensor | None = None,
                   pick: LastRowPick | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection sampling of a chain of drafts against the target's filtered distribution:
    ``logits`` [B, S+1, V], ``drafts`` [B, S], candidates ``cand`` / ``q`` [B, S, K], per-request
    parameters [B] (raw, as ``RowState`` holds them), uniforms ``u_accept`` [B, S] and
    ``u_residual`` [B]. Returns (accept_len [B], emitted [B, S+1]), int64. Two kernel launches
    (``use_kernels``; five and a memset with ``bf16_values``, see ``filter_rows``; ``tickets`` as
    ``rejection_sample`` takes them), else ``sampled_accept_reference``. ``emitted_out``
    [B, S+1] int64 contiguous: receives ``emitted`` and is returned as it. ``pick`` (reads
    ``emitted_out``): the draft extend's last accepted rows picked in the acceptance's launch
    (``rejection_sample``), after it by torch where the kernels do not run."""
    if not use_kernels(logits):
        if pick is not None:
            pick.require_reads(emitted_out, "sampled_accept")
        accept, emitted = sampled_accept_reference(logits, drafts, cand, q, temperature, top_k, top_p, min_p,
                                                   u_accept, u_residual)
        emitted = emitted_out.copy_(emitted) if emitted_out is not None else emitted
        if pick is not None:
            pick.by_torch(accept)
        return accept, emitted
    bs, ndt, vocab = logits.shape
    flat = logits.reshape(bs * ndt, vocab)
    stats = filter_rows(flat, ndt, temperature, top_k, top_p, min_p, bf16_values)
    return rejection_sample(flat, stats, temperature, drafts, cand, q, u_accept, u_residual, tickets, emitted_out, pick)


def sampled_accept_reference(logits: torch.Tensor, drafts: torch.Tensor, cand: torch.Tensor,
                             q: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                             top_p: torch.Tensor, min_p: torch.Tensor, u_accept: torch.Tensor,
                             u_residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``sampled_accept`` by dense tensors: ``Sampler.probs`` (a full-vocabulary sort per row),
    q scattered into [B, S, V], ``rejection_accept`` (float64 inverse CDF). The reference the
    kernels are tested against, and the path where Triton cannot run. Logits of any float dtype
    are widened to float32 first (the kernels widen as they load)."""
    logits = logits.float()
    bs, ndt, vocab = logits.shape
    s = ndt - 1

    def rep(t: torch.Tensor) -> torch.Tensor:
        return t.repeat_interleave(ndt) if ndt > 1 else t

    # top_k may be float (RowState's): the sampler indexes with it (clamped first: any value >= V
    # is off, and a float past int64 would not convert).
    top_k = top_k.clamp(max=vocab).long()
    sb = SamplingBatch.on_device(rep(temperature), rep(top_k), rep(top_p), rep(min_p), vocab)
    probs = Sampler().probs(logits.reshape(bs * ndt, vocab), sb).view(bs, ndt, vocab)
    if s == 0:
        tok = device_rng.inverse_cdf(probs[:, 0], u_residual)
        return torch.ones(bs, dtype=torch.long, device=logits.device), tok[:, None]
    dense = torch.zeros(bs, s, vocab, dtype=q.dtype, device=q.device).scatter_(2, cand, q)
    accept, emitted = rejection_accept(drafts, dense, probs, [], u_accept, u_residual)
    return accept.long(), emitted

"""Split-KV attention's merge folded into the o_proj GEMV: ``merge_linear_add_norm``.

A decode-kernel attention over ``S`` KV splits leaves, per token row ``t``, query head ``h`` and
split ``s``, ``mid_o[t, h, s]`` (the split's output, normalised over its own keys, float32) and
``mid_lse[t, h, s]`` (log2 of its softmax denominator plus its running max; -inf where the split
saw no key). The layer then merges them (``merge_splits``, one launch) and multiplies by the
o_proj weight, adding the residual and preparing the post-attention norm
(``gemv.linear_add_norm``, a second launch). Here one launch does both and leaves the same
``NormedRows``, so the gate/up launch after it is unchanged.

Program ``(h, c)``: head ``h``'s live splits merged for every token row (``merge_splits``'
weights; the merged row rounded to the activation dtype, as its output is), times the weight
columns of head ``h`` for the ``BLOCK_N`` output columns of tile ``c``, stored as float32 into
its own slice ``part[h]``. A ticket per column tile (``acq_rel``; the GEMV's argmax epilogue's
pattern): the program drawing the last one sums ``part[0..H-1]`` of its tile in head order
(deterministic: no float atomics), rounds the sum, adds the residual and writes the stream, the
scaled rows and its partial sum of squares (``gemv_kernels._add_norm_epilogue``), then resets
its ticket. Each of a column tile's ``H`` programs repeats its head's merge, so the fold costs
more merge work the more splits hold keys: the attention backend chooses where to hand its
partials over (``TritonBackend.fold_merge_rows``).

H100, 2026-12-07 (``benchmarks/oproj_fold_probe.py``, SmolLM2's o_proj at the engine's split counts,
us a layer against the two launches as the engine runs them): 1 row +0.6; a bs-1 verify's 6 rows
over 44 splits +0.2 / +1.1 at 6 / 22 live; 8-32 rows -0.2 to +0.8; the bs-8 verify's 48 rows over 11
splits +0.1 / +1.4 / +3.3 at 2 / 6 / 11 live (against its merge without PDL: with PDL the pair took
11.7 us, the fold 6.2-9.4). The S = 5 cycle lost with it in both forms timed (bs 8 +84 / +124 us),
so ``TritonBackend.fold_merge_rows`` keeps it off.

Numerics: the product per head is a float32 sum over ``D`` columns and the heads are added in
order, where ``linear_add_norm`` sums the whole row in its K chunks: the last bits of the float32
sum differ, then one rounding to the dtype as there. Run to run the result repeats bit for bit.

Hazards: the tickets (``_ticket_buffer``: one int32 per column tile, allocated outside graph capture,
0 between launches) are shared by every launch on a device, so two launches must not run at
once on two streams (the backend folds only its own layers' merges on the forward's stream).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from updraft.ops import interpreting
from updraft.ops.gemv import MAX_M, NormedRows
from updraft.ops.gemv_kernels import _add_norm_epilogue, _product
from updraft.ops.triton_utils import emulate_rne, pdl_enter, pdl_opts, pdl_release_late, round_to

#: Column tiles a launch may use (tickets allocated per device).
MAX_TILES = 512


@triton.jit
def merged_head(MidO, MidLse, h, m, mmask, s_mt, s_mh, s_ms, s_lt, s_lh, num_splits, D: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr, ALL_S: tl.constexpr):
    """Head ``h``'s splits merged for token rows ``m`` -> float32 [BLOCK_M, D] (``merge_splits``'
    weights ``2^(lse - max)``; only live splits' partials are loaded, the others may be stale;
    a row with no live split gets 0). The loop stops after the last split holding a key."""
    sa = tl.arange(0, ALL_S)
    lse = tl.load(MidLse + m[:, None] * s_lt + h * s_lh + sa[None, :], mask=mmask[:, None] & (sa < num_splits)[None, :],
                  other=float("-inf"))
    alive = lse > float("-inf")
    last = tl.max(tl.max(tl.where(alive, sa[None, :] + 1, 0), 1), 0)
    mx = tl.max(lse, 1)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    den = tl.sum(tl.where(alive, tl.exp2(lse - mx[:, None]), 0.0), 1)
    d = tl.arange(0, D)
    o = tl.zeros([BLOCK_M, D], tl.float32)
    for s0 in range(0, last, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        ls = tl.load(MidLse + m[:, None] * s_lt + h * s_lh + s[None, :], mask=mmask[:, None] & (s < num_splits)[None, :],
                     other=float("-inf"))
        live = ls > float("-inf")
        wt = tl.where(live, tl.exp2(ls - mx[:, None]), 0.0)
        part = tl.load(MidO + m[:, None, None] * s_mt + h * s_mh + s[None, :, None] * s_ms + d[None, None, :],
                       mask=live[:, :, None], other=0.0)
        o += tl.sum(wt[:, :, None] * part, 1)
    return o / tl.where(den == 0.0, 1.0, den)[:, None]


@triton.jit(do_not_specialize=["M"])
def merge_linear_kernel(MidO, MidLse, W, Part, Tick, Res, NW, Stream, Scaled, Sq, M, N, s_mt, s_mh, s_ms, s_lt, s_lh,
                        s_w, s_r, s_st, num_splits, D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_S: tl.constexpr, ALL_S: tl.constexpr, DOT: tl.constexpr, DOT_F32: tl.constexpr,
                        PREC: tl.constexpr, RNE: tl.constexpr, PDL: tl.constexpr):
    h = tl.program_id(0)
    c = tl.program_id(1)
    heads = tl.num_programs(0)
    n = c * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    d = tl.arange(0, D)
    # weights only before the wait: head h's columns of this tile
    w = tl.load(W + n[:, None].to(tl.int64) * s_w + h * D + d[None, :], mask=nmask[:, None], other=0.0)
    pdl_enter(PDL)
    m = tl.arange(0, BLOCK_M)
    mmask = m < M
    o = merged_head(MidO, MidLse, h, m, mmask, s_mt, s_mh, s_ms, s_lt, s_lh, num_splits, D, BLOCK_M, BLOCK_S, ALL_S)
    o = round_to(o, W.dtype.element_ty, RNE)
    y = _product(w, o, tl.zeros([BLOCK_N, BLOCK_M], tl.float32), DOT, DOT_F32, PREC)  # [BLOCK_N, BLOCK_M]
    omask = nmask[:, None] & mmask[None, :]
    off = m[None, :].to(tl.int64) * N + n[:, None]
    tl.store(Part + h * M * N + off, y, mask=omask)
    tl.debug_barrier()  # every thread's share stored before the ticket publishes it
    ticket = tl.atomic_add(Tick + c, 1, sem="acq_rel")
    if ticket == heads - 1:
        tot = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
        for hh in range(0, heads):
            tot += tl.load(Part + hh * M * N + off, mask=omask, other=0.0)
        s_new = _add_norm_epilogue(round_to(tot, W.dtype.element_ty, RNE), Res, NW, Scaled, Sq, n, nmask, m, mmask, c,
                                   tl.num_programs(1), s_r, N, W.dtype.element_ty, RNE)
        tl.store(Stream + m[None, :].to(tl.int64) * s_st + n[:, None], s_new, mask=omask)
        tl.atomic_xchg(Tick + c, 0)  # ready for the next launch (stream order publishes it)
    pdl_release_late(PDL)


@functools.cache
def _ticket_buffer(device: torch.device) -> torch.Tensor:
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("gemv_merge: the ticket counters must be allocated before graph capture (run a warm-up "
                           "forward)")
    return torch.zeros(MAX_TILES, dtype=torch.int32, device=device)


def _tile(m: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) by token rows (H100, 2026-12-07: 64 / 4 best at 6-8 rows; 32 / 8 at 48)."""
    return (64, 4) if m <= 16 else (32, 8)


def _row_tiles(m: int, d: int) -> tuple[bool, int, int]:
    """(DOT, BLOCK_M, BLOCK_S) by token rows and head width: tensor cores past two rows (a tile of
    at least 16 rows), FMA below; splits merged ``BLOCK_S`` at a time within ~8K partial values."""
    dot = m > 2
    block_m = max(16, triton.next_power_of_2(m)) if dot else triton.next_power_of_2(m)
    return dot, block_m, max(1, min(8, 8192 // (block_m * d)))


def supported(mid_o: torch.Tensor, mid_lse: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor) -> bool:
    """Whether the fold covers these inputs: ``mid_o`` [T, H, S, D] float32 with a power-of-two
    D >= 16 and ``weight`` [N, H * D] of the residual's dtype, 1..64 rows, contiguous last dims."""
    if mid_o.dim() != 4 or mid_lse.dim() != 3 or weight.dim() != 2 or residual.dim() != 2:
        return False
    t, heads, splits, d = mid_o.shape
    n = weight.shape[0]
    return (mid_o.dtype == torch.float32 and mid_lse.dtype == torch.float32 and tuple(mid_lse.shape) == (t, heads, splits)
            and 1 <= t <= MAX_M and d >= 16 and d & (d - 1) == 0 and weight.shape[1] == heads * d
            and weight.dtype == residual.dtype and tuple(residual.shape) == (t, n)
            and residual.dtype in (torch.float32, torch.bfloat16, torch.float16)
            and mid_o.stride(3) == 1 and mid_lse.stride(2) == 1 and weight.stride(1) == 1 and residual.stride(1) == 1
            and mid_o.device == weight.device == residual.device
            and triton.cdiv(n, _tile(t)[0]) <= MAX_TILES)


def merge_linear_add_norm(mid_o: torch.Tensor, mid_lse: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                          norm_weight: torch.Tensor, eps: float, *, stream_out: torch.Tensor | None = None,
                          tile: tuple[int, int] | None = None, pdl: bool = True) -> NormedRows:
    """``merge(mid_o, mid_lse) @ weight.T`` added to ``residual`` and made ready for the RMSNorm
    (``norm_weight``, ``eps``) after it: ``gemv.linear_add_norm`` of the merged rows, one launch.
    ``stream_out``: where the new stream lands (any row stride; default a new tensor); ``tile``:
    (BLOCK_N, num_warps) in place of the rows' default (a power of two >= 16; a sweep's); ``pdl``
    False: launched without PDL whatever the family allows (``SplitPartials.pdl``)."""
    if not supported(mid_o, mid_lse, weight, residual):
        raise ValueError("gemv_merge.merge_linear_add_norm: unsupported inputs (see gemv_merge.supported)")
    t, heads, splits, d = mid_o.shape
    n = weight.shape[0]
    if norm_weight.shape != (n,) or norm_weight.dtype != residual.dtype:
        raise ValueError(f"gemv_merge: norm weight {tuple(norm_weight.shape)} {norm_weight.dtype}, expected ({n},) "
                         f"{residual.dtype}")
    if stream_out is not None and (stream_out.shape != (t, n) or stream_out.dtype != residual.dtype
                                   or stream_out.stride(1) != 1):
        raise ValueError(f"gemv_merge: stream_out {tuple(stream_out.shape)} {stream_out.dtype}, expected ({t}, {n}) "
                         f"{residual.dtype} with contiguous rows")
    block_n, warps = tile or _tile(t)
    if block_n < 16 or block_n & (block_n - 1) or triton.cdiv(n, block_n) > MAX_TILES:
        raise ValueError(f"gemv_merge: tile {tile} (BLOCK_N a power of two >= 16, at most {MAX_TILES} column tiles)")
    tiles = triton.cdiv(n, block_n)
    dot, block_m, block_s = _row_tiles(t, d)
    dot_f32 = dot and interpreting() and residual.dtype != torch.float32
    stream = stream_out if stream_out is not None else torch.empty_like(residual)
    scaled = torch.empty(t, n, dtype=residual.dtype, device=residual.device)  # contiguous: the next GEMM's rows
    sumsq = torch.empty(t, tiles, dtype=torch.float32, device=residual.device)
    part = torch.empty(heads, t, n, dtype=torch.float32, device=residual.device)
    merge_linear_kernel[(heads, tiles)](
        mid_o, mid_lse, weight, part, _ticket_buffer(residual.device), residual, norm_weight, stream, scaled, sumsq,
        t, n, mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1),
        weight.stride(0), residual.stride(0), stream.stride(0), splits, D=d, BLOCK_N=block_n, BLOCK_M=block_m,
        BLOCK_S=block_s, ALL_S=triton.next_power_of_2(splits), DOT=dot,
        DOT_F32=dot_f32, PREC="ieee" if residual.dtype == torch.float32 or dot_f32 else "tf32", RNE=emulate_rne(),
        num_warps=warps, **pdl_opts(residual.device, "gemv", late=True, allowed=pdl))
    return NormedRows(stream, scaled, sumsq, float(eps))

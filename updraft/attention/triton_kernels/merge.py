"""Second pass of split-KV attention: merge per-split partial outputs by log-sum-exp.

Split ``s`` of query row ``t``, head ``h`` left ``mid_o[t, h, s]`` (its output normalised over its
own keys) and ``mid_lse[t, h, s]`` (log2 of its softmax denominator plus its running max, or -inf
when the split saw no key). The merged output is ``sum_s w_s * mid_o_s / sum_s w_s`` with
``w_s = 2^(lse_s - max lse)``.

Grid: ``(T, cdiv(num_heads, BLOCK_HM), cdiv(HEAD_DIM, BLOCK_D))``; each program loads all splits
of ``BLOCK_HM`` heads of its row at once, ``BLOCK_D`` columns of them (``BLOCK_S =
next_pow2(num_splits)``, a frozen host scalar; ``BLOCK_D`` and ``BLOCK_HM`` keep the tile near 4K
elements, so 32 splits of MLA's 512-wide latent output do not spill; under the interpreter,
where each op is expensive, one program takes all heads and columns). Splits with ``lse = -inf`` are masked
out of the load, so empty splits cost no bandwidth, except where the caller says every split
wrote its partial (``written``: the decode kernels'): then they load beside the lse, which saves
the round trip to L2 that gating them on it costs, and weigh 0. A row whose every split is empty (only
possible with unseeded, zero-length metadata: failure class 8) gets 0, not NaN. A row with a
split whose lse is +inf is done (the extend kernel's split that saw every key of its request
wrote the output itself): the merge loads nothing of it and leaves its output alone.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.attention.triton_kernels import interpreting, next_pow2
from updraft.ops.triton_utils import Family, pdl_enter, pdl_opts


@triton.jit
def _merge_kernel(
    MidO,
    MidLse,
    Out,
    stride_mt,
    stride_mh,
    stride_ms,
    stride_lt,
    stride_lh,
    stride_ot,
    stride_oh,
    num_heads,
    num_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_HM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr, PDL: tl.constexpr, WRITTEN: tl.constexpr,
):
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_HM + tl.arange(0, BLOCK_HM)
    s = tl.arange(0, BLOCK_S)
    d = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    hs_mask = (h[:, None] < num_heads) & (s[None, :] < num_splits)
    lse = tl.load(
        MidLse + t * stride_lt + h[:, None] * stride_lh + s[None, :], mask=hs_mask, other=float("-inf")
    )  # [HM, S]
    o_ptrs = MidO + t * stride_mt + h[:, None, None] * stride_mh + s[None, :, None] * stride_ms + d[None, None, :]
    dmask = d[None, None, :] < HEAD_DIM
    if WRITTEN:  # issued right after the lse, before anything waits for it: one round trip to L2, not two
        o = tl.load(o_ptrs, mask=hs_mask[:, :, None] & dmask, other=0.0)  # [HM, S, D]; a dead split's 0s weigh 0
    done = tl.max(lse, 1) == float("inf")  # written by the split that saw every key (extend)
    live = (lse > float("-inf")) & (lse < float("inf"))
    mx = tl.max(tl.where(live, lse, float("-inf")), 1)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.where(live, tl.exp2(lse - mx[:, None]), 0.0)
    if not WRITTEN:  # only the live splits' partials: the others may be stale memory
        o = tl.load(o_ptrs, mask=live[:, :, None] & dmask, other=0.0)
    num = tl.sum(w[:, :, None] * o, 1)
    den = tl.sum(w, 1)
    out = num / tl.where(den == 0.0, 1.0, den)[:, None]
    o_mask = (h[:, None] < num_heads) & (d[None, :] < HEAD_DIM) & ~done[:, None]
    tl.store(Out + t * stride_ot + h[:, None] * stride_oh + d[None, :], out.to(Out.dtype.element_ty), mask=o_mask)


#: The largest tile (heads x splits x columns of partials) a grid cap may give a merge program: four
#: times the tile rule's 4,096; SmolLM2's 48-row verify at 16 heads over 16 split slots of 64 columns.
MAX_CAPPED_TILE = 16384


def merge_tiles(num_tokens: int, num_heads: int, num_splits: int, dim: int, heads_per_program: int | None = None,
                max_programs: int = 0) -> tuple[int, int, int]:
    """``merge_splits``' (BLOCK_HM, BLOCK_S, BLOCK_D): the rule's tile of at most 4,096 partial
    elements, more heads a program where the splits are few; ``heads_per_program`` and
    ``max_programs`` as ``merge_splits`` takes them (a cap grows the tile to ``MAX_CAPPED_TILE``)."""
    block_s, block_d = next_pow2(num_splits), next_pow2(dim)
    if interpreting():
        block_hm = next_pow2(num_heads)
    else:
        block_d = min(block_d, max(32, 4096 // block_s))
        block_hm = max(1, min(next_pow2(num_heads), 4096 // (block_s * block_d)))
    if heads_per_program is not None:
        if heads_per_program < 1 or heads_per_program & (heads_per_program - 1):
            raise ValueError(f"merge_splits: heads_per_program must be a power of two >= 1, got {heads_per_program}")
        block_hm = heads_per_program
    elif max_programs > 0:  # at most MAX_CAPPED_TILE partials a program (the largest tile timed)
        while (block_hm < num_heads and 2 * block_hm * block_s * block_d <= MAX_CAPPED_TILE
               and num_tokens * -(-num_heads // block_hm) * -(-dim // block_d) > max_programs):
            block_hm *= 2
    return block_hm, block_s, block_d


def merge_splits(mid_o: torch.Tensor, mid_lse: torch.Tensor, out: torch.Tensor, family: Family = "attention",
                 pdl: bool = True, written: bool = False, heads_per_program: int | None = None,
                 max_programs: int = 0) -> None:
    """``mid_o`` [T, H, S, D] fp32, ``mid_lse`` [T, H, S] fp32 -> ``out`` [T, H, D] (its dtype);
    ``family``: the PDL family of the launch (the attention kernel's before it); ``pdl`` False:
    no PDL whatever the family allows. ``written``: the attention launch before this one wrote
    every split's partial, a split without keys its zeros (the decode kernels), so the partials
    load beside their lse instead of after it, where only the live ones would be read (the
    extend kernels leave a split without keys unwritten: stale memory, possibly NaN).
    ``heads_per_program``: in place of the tile rule's (a power of two; a probe's sweep of the grid).
    ``max_programs`` (> 0): where this launch is on PDL (``pdl`` and ``family``'s PDL on), more heads a
    program, up to all of them or ``MAX_CAPPED_TILE`` partials, until the grid fits that many programs
    (``TritonBackend.merge_pdl_grid``); off PDL the tile rule alone (the wide grid only hurt on PDL)."""
    num_tokens, num_heads, num_splits, dim = mid_o.shape
    if num_tokens == 0:
        return
    assert mid_o.stride(-1) == 1 and mid_lse.stride(-1) == 1 and out.stride(-1) == 1
    opts = pdl_opts(mid_o.device, family, allowed=pdl)
    cap = max_programs if opts["PDL"] else 0
    block_hm, block_s, block_d = merge_tiles(num_tokens, num_heads, num_splits, dim, heads_per_program, cap)
    grid = (num_tokens, triton.cdiv(num_heads, block_hm), triton.cdiv(dim, block_d))
    _merge_kernel[grid](
        mid_o,
        mid_lse,
        out,
        mid_o.stride(0),
        mid_o.stride(1),
        mid_o.stride(2),
        mid_lse.stride(0),
        mid_lse.stride(1),
        out.stride(0),
        out.stride(1),
        num_heads,
        num_splits,
        HEAD_DIM=dim,
        BLOCK_HM=block_hm,
        BLOCK_S=block_s,
        BLOCK_D=block_d,
        WRITTEN=written,
        num_warps=4 if block_hm * block_s * block_d >= 2048 else 2, **opts,
    )

"""The pool slots of a block of cached positions, for kernels that gather K/V (or latent) rows
through ``req_to_token``, optionally loaded one block ahead.

Why ahead: loaded in the iteration that uses them, the slots make each block's row loads depend
on an earlier load of the same iteration, and Triton's pipeliner then gives the row tile ONE
shared-memory buffer at any ``num_stages``: the next block's copy starts after this block's dots,
so nothing overlaps inside a program (sm_90 TTGIR, triton 3.6). Loaded a block ahead (a
loop-carried value, ``PREFETCH``), the dependency is gone and ``num_stages = 3`` double-buffers
the tile (two buffers, ``async_wait`` leaving one block in flight). ``compile_check`` compiles
both with the launcher's divisibility hints, without which no load is pipelined at all.

Use, in a loop over ``start in range(lo, hi, BLOCK_N)`` with ``pos = start + arange(BLOCK_N)``::

    slot_next = first_slots(table_row, lo, hi, BLOCK_N, PREFETCH)
    for start in ...:
        slot, slot_next = block_slots(table_row, pos, hi, slot_next, BLOCK_N, PREFETCH)

Prewarm (``prewarm_slots`` + ``prefetch_rows``, the decode kernels' ``PREWARM``): before its PDL
wait a program prefetches its split's first block of cached rows into L2, so the first loads
after the wait meet them there instead of starting the trip to memory then. The PDL contract
(``ops.triton_utils``) allows no load before the wait but weight prefetches; this bends it
safely: the lengths, pool indices and slots it reads were written by the batch's metadata,
kernels before (this kernel starts only once the one before it has passed its own wait, so every
kernel before that one has completed and its writes are visible), the cached rows steps before;
in the fused iteration ``read_rows`` writes the metadata at its start. They are read through L2 only
(``.cg``: no L1 line a later load could hit stale), and nothing but prefetch addresses is
computed from them. A value still being written costs a useless prefetch, never a wrong result.
"""

from __future__ import annotations

import triton
import triton.language as tl

from updraft.ops.triton_utils import prefetch_l2


@triton.jit
def first_slots(table_row, lo, hi, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):
    """The first block's slots (int32) when ``PREFETCH``; without it, a load that reads nothing
    (all masked), so the loop carries the same value in both variants."""
    nxt = lo + tl.arange(0, BLOCK_N)
    return tl.load(table_row + nxt, mask=(nxt < hi) & PREFETCH, other=0)


@triton.jit
def block_slots(table_row, pos, hi, slot_next, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):
    """``(slots of positions pos as int64 (0 past hi), the next block's slots)``."""
    if PREFETCH:
        slot = slot_next.to(tl.int64)
        nxt = pos + BLOCK_N
        slot_next = tl.load(table_row + nxt, mask=nxt < hi, other=0)
    else:
        slot = tl.load(table_row + pos, mask=pos < hi, other=0).to(tl.int64)
    return slot, slot_next


@triton.jit
def split_len(n, num_splits, BLOCK_N: tl.constexpr, MIN_SPLIT: tl.constexpr):
    """Positions a KV split covers when ``n`` are split ``num_splits`` ways (a host scalar frozen
    at capture): whole ``BLOCK_N`` blocks, at least ``MIN_SPLIT``; short contexts leave the
    trailing splits empty. Every split-KV kernel (and the prewarm) splits by this."""
    return tl.maximum(tl.cdiv(tl.cdiv(n, num_splits), BLOCK_N) * BLOCK_N, MIN_SPLIT)


@triton.jit
def prewarm_slots(SeqLens, ReqPoolIdx, ReqToToken, b, split, num_splits, stride_rt, STRIDE: tl.constexpr,
                  BLOCK_N: tl.constexpr, MIN_SPLIT: tl.constexpr):
    """``(slots int64 [BLOCK_N], mask)``: the pool slots of the first block of cached positions of
    split ``split`` of request ``b`` (the decode kernels' split arithmetic; the block's own
    ``STRIDE`` new positions excluded), read through L2 before the PDL wait (module docstring)."""
    seq = tl.load(SeqLens + b, cache_modifier=".cg")
    rpi = tl.load(ReqPoolIdx + b, cache_modifier=".cg").to(tl.int64)
    lo = split * split_len(seq, num_splits, BLOCK_N, MIN_SPLIT)
    pos = lo + tl.arange(0, BLOCK_N)
    ok = pos < tl.maximum(seq - STRIDE, 0)
    slot = tl.load(ReqToToken + rpi * stride_rt + pos, mask=ok, other=0, cache_modifier=".cg")
    return slot.to(tl.int64), ok


@triton.jit
def prefetch_rows(Base, slot, ok, stride_s, ROW: tl.constexpr, LINE: tl.constexpr):
    """L2 prefetch of the ``ROW`` values at ``Base + slot * stride_s`` of every ``ok`` slot, one
    prefetch per ``LINE`` values (a 128-byte line)."""
    LINES: tl.constexpr = (ROW + LINE - 1) // LINE
    line = tl.arange(0, triton.next_power_of_2(LINES))
    ptr = Base + slot[:, None] * stride_s + line[None, :] * LINE
    prefetch_l2(tl.where(ok[:, None] & (line[None, :] < LINES), ptr, Base))

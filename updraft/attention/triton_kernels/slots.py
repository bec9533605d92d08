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
"""

from __future__ import annotations

import triton
import triton.language as tl


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

"""A draft step's LM head without cuBLAS: the greedy pick without the logits (``HeadPick``) and a
sampled step's logits from the same launch (``head_logits``).

A one-layer draft head's greedy step ends in its LM head (SmolLM2's EAGLE-3 head: 8,192 x 576)
and an argmax over the logits, mapped to target ids. On cuBLAS the head cannot start before the
kernel in front of it has ended (no PDL), and the argmax is a launch of its own. Here:

* ``_pick_kernel``: one wave of programs, ``BLOCK_N`` vocabulary rows each (one input row on the
  FMA units, more on the tensor cores), loads its weight
  rows into registers BEFORE the PDL wait (weights are never written, so the contract of
  ``updraft.ops.triton_utils`` allows it: the loads run during the previous kernel's tail); after
  the wait it reads the input rows and ends with ONE ``atomic_max`` per input row on an int64
  slot holding ``(ordered logit bits << 32) | (2^31 - 1 - index)``: the largest logit wins, the
  smallest index among equals (``torch.argmax``'s rule); no partials, no ticket.
* ``_read_kernel``: one program reads each slot back to its index, maps it to a target id (the
  head's ``d2t`` table, or a token map), applies the lookup assist's lock, writes the draft into
  its column of the verify block, and empties the slot for the next step (it is the slot's only
  reader, and the next pick waits for it through PDL's chain).

Logits are rounded to the rows' dtype before they compete (the bf16 LM head's logits tie where
it does). NaN logits rank above every number when their sign bit is clear, below every number
when it is set (``argmax_rows`` ranks every NaN first). Hazards: ``H <= MAX_HIDDEN`` (the
weight tile lives in registers), ``rows <= MAX_ROWS`` (the widest timed), the vocabulary below
2^31, one slot set per ``HeadPick`` (launches in stream order; every pick's reader empties it).

Dispatch (as ``updraft.spec.sampling_kernels``): the kernels on CUDA tensors and, for tests, on
CPU tensors under the Triton interpreter; otherwise the torch code, which is the reference
(``head_logits``: ``F.linear``). H100, SmolLM2's greedy S = 5 cycle: 16 us shorter at bs 1,
6-9 us at bs 2-8 (benchmarks/results/2026-12-06-h100-head-pick).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import pdl_enter, pdl_opts
from updraft.spec.sampling_kernels import target_id, use_triton

#: An empty slot: below every packed (logit, index).
EMPTY = -(2 ** 63)
#: The widest input row taken: its weight tile lives in registers (timed at 576; at 1,024 a bf16
#: tile of 32 rows holds 128 registers a thread).
MAX_HIDDEN = 1024
#: The most rows a launch takes (timed up to 8 in the cycle; cuBLAS + argmax above).
MAX_ROWS = 8
#: The weight rows loaded before the PDL wait (read at launch; off: after it).
PRELOAD = True


@dataclass(frozen=True)
class HeadRows:
    """A draft step's LM head, not yet applied: its input ``rows`` [B, H] (any positive factor per
    row left out: the argmax is the same) and ``weight`` [V, H]."""

    rows: torch.Tensor
    weight: torch.Tensor


def fits(hidden: int, rows: int) -> bool:
    """Whether ``HeadPick`` takes a head of width ``hidden`` over ``rows`` rows."""
    return 0 < hidden <= MAX_HIDDEN and 0 < rows <= MAX_ROWS


@triton.jit
def _ordered(x):
    """float32 -> int32 in the floats' order (signed compare)."""
    b = x.to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, b ^ 0x7FFFFFFF)


@triton.jit
def _pick_kernel(X, s_x, W, s_w, Slot, Out, s_out, M, N, K1: tl.constexpr, K2: tl.constexpr,
                 BLOCK_K2: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, DOT: tl.constexpr,
                 PRELOAD: tl.constexpr, IEEE: tl.constexpr, LOGITS: tl.constexpr, PDL: tl.constexpr):
    """Program ``p``: vocabulary rows ``p * BLOCK_N ..`` of ``W`` (columns ``0 .. K1 - 1`` and
    ``K1 .. K1 + K2 - 1``) against each of the ``M`` rows of ``X``; one atomic max a row into
    ``Slot``, or (``LOGITS``) the logits into ``Out`` [M, N] (row stride ``s_out``; ``Slot``
    unread). ``DOT``:
    every row at once on the tensor cores (``BLOCK_M >= 16``; ``IEEE``: fp32 products, not tf32),
    else one row after another on the FMA units. ``PRELOAD``: the weights loaded before the wait."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    k1 = tl.arange(0, K1)
    k2 = K1 + tl.arange(0, BLOCK_K2)
    k2m = k2 < K1 + K2
    wrow = W + n.to(tl.int64)[:, None] * s_w
    if PRELOAD:
        w1 = tl.load(wrow + k1[None, :], mask=nmask[:, None], other=0.0)  # held in their dtype (registers)
        w2 = tl.load(wrow + k2[None, :], mask=nmask[:, None] & k2m[None, :], other=0.0)
    pdl_enter(PDL)  # the weights are in flight; the rows are the previous kernel's output
    if not PRELOAD:
        w1 = tl.load(wrow + k1[None, :], mask=nmask[:, None], other=0.0)
        w2 = tl.load(wrow + k2[None, :], mask=nmask[:, None] & k2m[None, :], other=0.0)
    low = (0x7FFFFFFF - n).to(tl.int64)
    if DOT:
        m = tl.arange(0, BLOCK_M)
        mm = m < M
        x1 = tl.load(X + m[:, None] * s_x + k1[None, :], mask=mm[:, None], other=0.0)
        x2 = tl.load(X + m[:, None] * s_x + k2[None, :], mask=mm[:, None] & k2m[None, :], other=0.0)
        prec: tl.constexpr = "ieee" if IEEE else "tf32"
        acc = tl.dot(w1, tl.trans(x1), input_precision=prec) + tl.dot(w2, tl.trans(x2), input_precision=prec)
        if LOGITS:
            tl.store(Out + m[None, :] * s_out + n[:, None], acc.to(Out.dtype.element_ty),
                     mask=nmask[:, None] & mm[None, :])
        else:
            acc = acc.to(X.dtype.element_ty).to(tl.float32)  # the logits' rounding
            key = tl.where(nmask[:, None], (_ordered(acc).to(tl.int64) << 32) | low[:, None], -9223372036854775807 - 1)
            tl.atomic_max(Slot + m, tl.max(key, axis=0), mask=mm, sem="relaxed")
    else:
        for r in tl.static_range(BLOCK_M):
            if r < M:
                a1 = tl.load(X + r * s_x + k1).to(tl.float32)
                a2 = tl.load(X + r * s_x + k2, mask=k2m, other=0.0).to(tl.float32)
                acc = (tl.sum(w1.to(tl.float32) * a1[None, :], axis=1)
                       + tl.sum(w2.to(tl.float32) * a2[None, :], axis=1))
                if LOGITS:
                    tl.store(Out + r * s_out + n, acc.to(Out.dtype.element_ty), mask=nmask)
                else:
                    acc = acc.to(X.dtype.element_ty).to(tl.float32)
                    key = tl.where(nmask, (_ordered(acc).to(tl.int64) << 32) | low, -9223372036854775807 - 1)
                    tl.atomic_max(Slot + r, tl.max(key, axis=0), sem="relaxed")


@triton.jit
def _read_kernel(Slot, Map, Out, s_out, Lock, s_lock, M, BLOCK_M: tl.constexpr, MAP: tl.constexpr,
                 ADD: tl.constexpr, LOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    m = tl.arange(0, BLOCK_M)
    mm = m < M
    s = tl.load(Slot + m, mask=mm, other=0)
    arg = target_id(Map, tl.where(mm, 0x7FFFFFFF - (s & 0xFFFFFFFF), 0), MAP, ADD)  # lanes past M read entry 0
    if LOCK:
        lock = tl.load(Lock + m * s_lock, mask=mm, other=-1)
        arg = tl.where(lock >= 0, lock, arg)
    tl.store(Out + m * s_out, arg, mask=mm)
    tl.store(Slot + m, tl.full([BLOCK_M], -9223372036854775807 - 1, tl.int64), mask=mm)


def _tile(dtype: torch.dtype, rows: int) -> tuple[int, int, bool]:
    """(weight rows a program, warps, tensor cores) for ``rows`` input rows. H100, bf16, SmolLM2's
    head warm in L2 (``benchmarks/head_pick_probe.py``, 2026-12-06): one row 4.2 us with the
    launch after it against 5.4 for cuBLAS + ``argmax_rows`` (16 x 4 a little faster alone, not
    timed in the cycle); 2-8 rows 4.7-4.9 on the tensor cores against 5.5 (the FMA path 5.7-15)."""
    if rows == 1:
        return (32, 4, False) if dtype.itemsize <= 2 else (16, 4, False)
    return (64, 4, True) if dtype.itemsize <= 2 else (32, 4, True)


def launch_pick(x: torch.Tensor, w: torch.Tensor, slot: torch.Tensor | None, block_n: int, warps: int, dot: bool,
                preload: bool | None = None, logits: torch.Tensor | None = None) -> None:
    """``_pick_kernel`` over ``x`` [M, K] and ``w`` [N, K] (rows contiguous) into ``slot`` [>= M]
    (empty), or, with ``slot`` None, into ``logits`` [M, N] (rows contiguous); the launch shape
    given (``HeadPick`` takes ``_tile``'s; the probe sweeps them)."""
    m, k = x.shape
    k1 = 1 << (k.bit_length() - 1)
    out = logits if slot is None else slot
    if out is None:
        raise ValueError("launch_pick: a slot or a logits tensor")
    _pick_kernel[(triton.cdiv(w.shape[0], block_n),)](
        x, x.stride(0), w, w.stride(0), out, out, out.stride(0), m, w.shape[0], K1=k1, K2=k - k1,
        BLOCK_K2=max(16, triton.next_power_of_2(k - k1)), BLOCK_N=block_n,
        BLOCK_M=max(16, triton.next_power_of_2(m)) if dot else triton.next_power_of_2(m), DOT=dot,
        PRELOAD=PRELOAD if preload is None else preload,
        IEEE=x.dtype == torch.float32, LOGITS=slot is None, num_warps=warps, **pdl_opts(x.device, "gemv"))


def launch_read(slot: torch.Tensor, table: tuple[torch.Tensor, bool] | None, dst: torch.Tensor,
                lock: torch.Tensor | None = None) -> None:
    """``_read_kernel``: the first ``len(dst)`` slots' indices, mapped by ``table`` and locked by
    ``lock`` (as ``HeadPick`` says), into ``dst``; the slots emptied."""
    b = dst.shape[0]
    t, add = table if table is not None else (None, True)
    lk = lock if lock is not None else dst
    _read_kernel[(1,)](slot, t if t is not None else dst, dst, dst.stride(0), lk, lk.stride(0), b,
                       BLOCK_M=max(2, triton.next_power_of_2(b)), MAP=t is not None, ADD=add, LOCK=lock is not None,
                       num_warps=1, **pdl_opts(slot.device, "sampling"))


class HeadPick:
    """The greedy pick of a draft LM head without its logits (the module docstring). Owns its
    slots: ``max_rows`` int64, empty between launches."""

    def __init__(self, max_rows: int, device: torch.device) -> None:
        self.slot = torch.full((max(max_rows, 1),), EMPTY, dtype=torch.int64, device=device)

    def __call__(self, head: HeadRows, table: tuple[torch.Tensor, bool] | None, dst: torch.Tensor,
                 lock: torch.Tensor | None = None) -> None:
        """Write into ``dst`` [B] (int64, any stride) each row's argmax over ``head``'s logits,
        mapped by ``table`` (``(t, add)``: ``i + t[i]`` or ``t[i]``; None: the index), or the
        row's ``lock`` where it is >= 0."""
        x, w = head.rows, head.weight
        b, k = x.shape
        if w.shape[1] != k or dst.shape != (b,) or dst.dtype != torch.int64:
            raise ValueError(f"HeadPick: rows {list(x.shape)}, weight {list(w.shape)}, dst {list(dst.shape)} {dst.dtype}")
        if b > self.slot.shape[0] or not fits(k, b):
            raise ValueError(f"HeadPick: {b} rows of width {k} (at most {min(self.slot.shape[0], MAX_ROWS)} "
                             f"rows of at most {MAX_HIDDEN})")
        if lock is not None and (lock.shape != (b,) or lock.dtype != torch.int64):
            raise ValueError(f"HeadPick: lock must be [{b}] int64, got {list(lock.shape)} {lock.dtype}")
        if not use_triton(x) or x.stride(1) != 1 or w.stride(1) != 1:
            _reference(head, table, dst, lock)
            return
        launch_pick(x, w, self.slot, *_tile(w.dtype, b))
        launch_read(self.slot, table, dst, lock)


def head_logits(head: HeadRows) -> torch.Tensor:
    """``head``'s logits [B, V] in the rows' dtype (a sampled draft's top-k reads them): the pick's
    launch writing them (its weights loaded before the PDL wait, where cuBLAS's head waits for
    the kernel before it to end) where ``HeadPick`` takes the head, else ``F.linear``."""
    x, w = head.rows, head.weight
    b, k = x.shape
    if not use_triton(x) or x.stride(1) != 1 or w.stride(1) != 1 or not fits(k, b) or w.shape[1] != k:
        return torch.nn.functional.linear(x, w)
    out = torch.empty(b, w.shape[0], dtype=x.dtype, device=x.device)
    launch_pick(x, w, None, *_tile(w.dtype, b), logits=out)
    return out


def _reference(head: HeadRows, table: tuple[torch.Tensor, bool] | None, dst: torch.Tensor,
               lock: torch.Tensor | None) -> None:
    """The torch reference (and the path off the kernels): float32 logits rounded to the rows'
    dtype, their argmax, mapped, locked."""
    logits = (head.rows.float() @ head.weight.float().T).to(head.rows.dtype)
    ids = logits.argmax(-1)
    if table is not None:
        ids = ids + table[0][ids] if table[1] else table[0][ids]
    if lock is not None:
        ids = torch.where(lock >= 0, lock, ids)
    dst.copy_(ids)

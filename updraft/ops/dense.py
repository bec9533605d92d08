"""``dense(x, weight, bias)``: what ``F.linear`` computes, with a CPU float32 path chosen for the
machine it runs on.

At decode and verify sizes (1-64 rows) a linear layer's product should read its weight once, at
the memory's speed. Which call does that depends on the CPU's BLAS:

* ``F.linear`` hands MKL ``x @ weight.T``. On a 2-core AMD EPYC (2026-11-26) one row was a GEMV at
  about a third of the memory bandwidth and 2-8 rows a GEMM costing about as many one-row
  products as it had rows (SmolLM2-135M's layers and LM head: 51 ms at one row, 98 at two);
  ``(weight @ x.T).T`` (``mm`` below) streamed the weight once at 1-8 rows (23-40 ms).
* On a 2-core Intel Xeon with AVX-512 (2026-12-05) it is the other way round: ``F.linear`` reads
  the weights in 17.5 ms at one row and 35 at four, the ``mm`` form in 45-48 ms at every size up to
  16 rows, and plain decoding with it ran at 16 tok/s against 34 with ``F.linear``.

So the choice is measured, not assumed: ``calibrate(weights)`` (the model runner calls it once
per process for a CPU float32 model whose weights do not fit a cache) times a pass over the
model's own weights with each call at each row bucket and keeps the faster per bucket
(``F.linear`` unless ``mm`` is 5% faster). Until then, and for models too small to measure, the
``mm`` form serves 1-64 rows (the earlier default). ``UPDRAFT_CPU_DENSE=linear|mm`` pins the
choice for every size (``auto``, the default, calibrates). Past 64 rows (prefill) ``F.linear``
always runs. One row goes to ``mm`` padded to two: a one-column GEMM is the slow GEMV again.

Numerics: each output is the same float32 dot product; the summation order differs between the
two calls, so results agree to rounding (~1e-6 relative), not bit for bit. Other devices and
dtypes take ``F.linear`` unchanged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

#: Row counts the CPU choice is made for: a product of m rows follows the first bucket >= m.
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
#: Most rows (tokens) a product takes the CPU choice with; past it, ``F.linear``.
MAX_ROWS = ROW_BUCKETS[-1]
#: Weights smaller than this fit a server CPU's last-level cache: timing them says nothing about
#: a forward that streams them from memory, so ``calibrate`` keeps the plan it has.
CALIBRATE_MIN_BYTES = 256 << 20
#: ``mm`` must beat ``F.linear`` by this factor to be chosen (``F.linear`` is the reference).
MM_MARGIN = 0.95
MODES = ("auto", "linear", "mm")
#: the bucket of each row count 0..MAX_ROWS (``dense`` looks it up on every product)
_BUCKET_OF = tuple(next(b for b in ROW_BUCKETS if b >= m) for m in range(MAX_ROWS + 1))

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DensePlan:
    """The row buckets whose CPU float32 products take the ``mm`` form; the rest take ``F.linear``.
    ``source``: ``default``, ``calibrated`` or ``UPDRAFT_CPU_DENSE=...``; ``ms``: bucket -> (F.linear,
    mm) milliseconds for one pass over the weights it was calibrated on."""

    mm_buckets: frozenset[int]
    source: str
    ms: dict[int, tuple[float, float]] = field(default_factory=dict, compare=False)

    def uses_mm(self, rows: int) -> bool:
        return _BUCKET_OF[rows] in self.mm_buckets

    def describe(self) -> str:
        linear = [b for b in ROW_BUCKETS if b not in self.mm_buckets]
        return f"CPU float32 products ({self.source}): mm at rows {sorted(self.mm_buckets)}, F.linear at {linear}"


_DEFAULT = DensePlan(frozenset(ROW_BUCKETS), "default")
_plan: DensePlan | None = None  # None: not yet read from the environment


def _env_mode() -> str:
    raw = os.environ.get("UPDRAFT_CPU_DENSE", "auto").strip().lower() or "auto"
    if raw not in MODES:
        raise ValueError(f"UPDRAFT_CPU_DENSE={raw!r} is invalid: expected one of {', '.join(MODES)}")
    return raw


def _pinned(mode: str) -> DensePlan:
    return DensePlan(frozenset(ROW_BUCKETS) if mode == "mm" else frozenset(), f"UPDRAFT_CPU_DENSE={mode}")


def plan() -> DensePlan:
    """The choice in force (read from ``UPDRAFT_CPU_DENSE`` the first time)."""
    global _plan
    if _plan is None:
        mode = _env_mode()
        _plan = _DEFAULT if mode == "auto" else _pinned(mode)
    return _plan


@contextmanager
def use_plan(mode: str) -> Iterator[DensePlan]:
    """Run a block under ``linear`` or ``mm`` for every row count (benchmarks, and tests of each
    form), then restore the plan before it."""
    global _plan
    if mode not in MODES[1:]:
        raise ValueError(f"use_plan: mode {mode!r} is invalid: expected linear or mm")
    before = plan()
    _plan = _pinned(mode)
    try:
        yield _plan
    finally:
        _plan = before


def mm_product(x2: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x2 @ weight.T`` for 1-``MAX_ROWS`` rows ``x2`` [M, K] as ``(weight @ x2.T).T``, contiguous."""
    m, k = x2.shape
    rows = x2.expand(2, k).contiguous() if m == 1 else x2  # never a one-column GEMM
    # Row-major before any bias: ``out + bias`` would keep the transposed strides, and callers
    # (the fused kernels' inputs among them) need contiguous rows.
    return torch.mm(weight, rows.t())[:, :m].t().contiguous()


def dense(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` for ``x`` [..., K] and ``weight`` [N, K] -> [..., N] (contiguous)."""
    if not _cpu_path(x, weight):
        return F.linear(x, weight, bias)
    k = x.shape[-1]
    rows = x.reshape(-1, k)
    m = rows.shape[0]
    if not 1 <= m <= MAX_ROWS or not plan().uses_mm(m):
        return F.linear(x, weight, bias)
    out = mm_product(rows, weight)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _cpu_path(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32
            and weight.dim() == 2 and x.dim() >= 1)


def _pass_ms(weights: Sequence[torch.Tensor], xs: dict[int, torch.Tensor], use_mm: bool) -> float:
    t0 = time.perf_counter()
    for w in weights:
        x = xs[w.shape[1]]
        if use_mm:
            mm_product(x, w)
        else:
            F.linear(x, w)
    return (time.perf_counter() - t0) * 1e3


@torch.inference_mode()
def calibrate(weights: Sequence[torch.Tensor], min_bytes: int = CALIBRATE_MIN_BYTES) -> DensePlan:
    """Choose ``F.linear`` or ``mm`` per row bucket by timing one pass over ``weights`` (a model's
    CPU float32 matrices, in forward order) with each; once per process. Keeps the plan in force
    when the environment pins one, when this process calibrated already, or when ``weights`` hold
    under ``min_bytes`` (see ``CALIBRATE_MIN_BYTES``). About 0.7 s for SmolLM2-135M on 2 cores."""
    global _plan
    current = plan()
    if current.source != "default":
        return current
    ws = [w for w in weights if w.dim() == 2 and w.dtype == torch.float32 and w.device.type == "cpu"]
    if not ws or sum(w.numel() * 4 for w in ws) < min_bytes:
        return current
    mm_buckets, ms = set(), {}
    for i, m in enumerate(ROW_BUCKETS):
        xs = {k: torch.randn(m, k) for k in {w.shape[1] for w in ws}}
        x0 = xs[ws[0].shape[1]]
        mm_product(x0, ws[0])  # first-call costs out of the timing
        F.linear(x0, ws[0])
        # alternate which form goes first, so a drift in the machine's speed favours neither
        mm_first = bool(i % 2)
        a = _pass_ms(ws, xs, mm_first)
        b = _pass_ms(ws, xs, not mm_first)
        linear_ms, mm_ms = (b, a) if mm_first else (a, b)
        ms[m] = (linear_ms, mm_ms)
        if mm_ms < MM_MARGIN * linear_ms:
            mm_buckets.add(m)
    _plan = DensePlan(frozenset(mm_buckets), "calibrated", ms)
    log.info("%s; ms per pass (F.linear, mm): %s", _plan.describe(),
             {m: (round(a, 1), round(b, 1)) for m, (a, b) in ms.items()})
    return _plan

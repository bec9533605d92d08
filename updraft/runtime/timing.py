"""Optional per-phase wall-clock timing (benchmarks). Disabled: a no-op context manager.
Enabled on CUDA: synchronises around each phase so the time is the phase's, not the queue's."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch

#: What a disabled timer hands out: one shared object (the engine enters several timed blocks
#: per step, and a generator-based context manager per block is host time per iteration).
_OFF: AbstractContextManager[None] = nullcontext()


class PhaseTimer:
    def __init__(self, device: torch.device, enabled: bool = False) -> None:
        self.device = device
        self.enabled = enabled
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __call__(self, name: str) -> AbstractContextManager[None]:
        return self._timed(name) if self.enabled else _OFF

    @contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        self._sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.totals[name] += time.perf_counter() - t0
            self.counts[name] += 1

    def reset(self) -> None:
        self.totals.clear()
        self.counts.clear()

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {k: {"total_s": v, "count": self.counts[k], "mean_ms": 1000 * v / max(1, self.counts[k])} for k, v in self.totals.items()}

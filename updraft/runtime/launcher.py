"""Launching one graph replay whose small output the host reads back later (the fused
iteration's launch), with its device time.

A launch is: record the start, replay, record the end, copy the output into host memory
without a sync, record the copy. ``CudaLauncher`` does that with events made ONCE per staging
slot and the stream resolved ONCE at construction: ``torch.cuda.Event.record()`` without a
stream calls ``torch.cuda.current_stream()`` (a chain of Python calls and environment
lookups), and three new events per launch are three event creations and destructions in the
driver; both were a large part of the host's work per iteration at batch 1.

Conventions and hazards:

* The stream is the device's current stream when the launcher is made; the replay and the
  copies run on the current stream at launch. The engine never switches streams; code that
  does must make its own launcher under that stream.
* Slot ``k``'s events (and the caller's slot-``k`` buffers) are recorded again by the launch
  after next that uses slot ``k``: a launch's results must be read (``synchronize`` /
  ``seconds``) before then. The engine reads every iteration before it launches the one after
  the next (overlap depth 1). ``Pending`` checks this and raises rather than return another
  launch's results.
* ``EmulatedLauncher`` is the CPU graph emulator's: the replay runs inside the launch (its wall
  time is the "device" time) and the copy lands only when the host synchronises, so a read
  before the wait fails on a CPU as on a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import torch


class Pending(Protocol):
    """One launch's completion: ``synchronize`` makes the host copy valid; ``seconds`` is the
    replay's device time (read after ``synchronize``)."""

    def synchronize(self) -> None: ...

    def seconds(self) -> float: ...


class _CudaSlot:
    """One staging slot's events; ``serial`` counts the launches that recorded them."""

    __slots__ = ("start", "end", "copied", "serial")

    def __init__(self) -> None:
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.copied = torch.cuda.Event()
        self.serial = 0


class _CudaPending:
    __slots__ = ("slot", "serial")

    def __init__(self, slot: _CudaSlot, serial: int) -> None:
        self.slot, self.serial = slot, serial

    def _check(self) -> _CudaSlot:
        if self.slot.serial != self.serial:
            raise RuntimeError("a launch's results were read after its slot was launched again "
                               "(read each launch before the launch after next)")
        return self.slot

    def synchronize(self) -> None:
        self._check().copied.synchronize()

    def seconds(self) -> float:
        s = self._check()
        return s.start.elapsed_time(s.end) / 1000.0


class CudaLauncher:
    """Launches on the stream that was current at construction, with ``slots`` sets of events
    made here (see the module docstring)."""

    def __init__(self, device: torch.device, slots: int = 2) -> None:
        self.stream = torch.cuda.current_stream(device)
        self._slots = [_CudaSlot() for _ in range(slots)]

    def launch(self, slot: int, replay: Callable[[], None], dst: torch.Tensor, src: torch.Tensor) -> _CudaPending:
        """Replay, then copy ``src`` into the pinned ``dst`` without a sync."""
        s, stream = self._slots[slot], self.stream
        s.serial += 1
        s.start.record(stream)
        replay()
        s.end.record(stream)
        dst.copy_(src, non_blocking=True)
        s.copied.record(stream)
        return _CudaPending(s, s.serial)


class _EmulatedPending:
    """The emulator's copy: ``src``'s values are taken at launch (as the copy queued behind the
    replay would read them) and land in ``dst`` when the host synchronises."""

    __slots__ = ("dst", "src", "elapsed")

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, elapsed: float) -> None:
        self.dst, self.src, self.elapsed = dst, src.clone(), elapsed

    def synchronize(self) -> None:
        self.dst.copy_(self.src)

    def seconds(self) -> float:
        return self.elapsed


class EmulatedLauncher:
    """The CPU graph emulator's launcher (see the module docstring)."""

    def launch(self, slot: int, replay: Callable[[], None], dst: torch.Tensor, src: torch.Tensor) -> _EmulatedPending:
        del slot  # the copy is made at launch: nothing is reused
        t0 = time.perf_counter()
        replay()
        return _EmulatedPending(dst, src, time.perf_counter() - t0)


def replay_seconds(replay: Callable[[], None], repeats: int) -> list[float]:
    """Device seconds of each of ``repeats`` CUDA ``replay`` calls, one after another."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(repeats):
        start.record()
        replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1000.0)
    return out


def fastest_replay(replay: Callable[[], None], repeats: int) -> float:
    """Device seconds of one CUDA ``replay``, for a cost table: one untimed replay first (a
    graph's first launch uploads it and runs cold), then the fastest of ``repeats`` timed ones
    (anything else in a replay's events only adds to its time)."""
    replay()
    return min(replay_seconds(replay, repeats))


def make_launcher(device: torch.device) -> CudaLauncher | EmulatedLauncher:
    return CudaLauncher(device) if device.type == "cuda" else EmulatedLauncher()

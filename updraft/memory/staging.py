"""Small host-to-device copies of int64 values that never make the host wait.

A copy from pageable memory waits for the work queued before it (the iteration in flight), and a
fresh pinned tensor per copy (``Tensor.pin_memory``) goes through the driver's page-locking
allocator when no cached block is free. ``StagingRing`` keeps host slots (pinned on CUDA) and
one device buffer, reused copy after copy.

Hazards:

* A host slot is rewritten only once the copy that read it has run (its event): a busy slot is
  never waited for (that would wait for the iteration in flight); the ring takes a new slot
  instead, so it grows to the largest burst of copies in flight and stays there.
* The device buffer is reused by every copy: whatever reads ``send``'s result must be queued
  before the next ``send``, on the one stream (current when the ring is made; the engine never
  switches streams). Both users read it at once, in the same call.
* Unstaged (a CPU "device"): ``send`` returns the host slot itself; one slot does.
"""

from __future__ import annotations

import numpy as np
import torch

MIN_ENTRIES = 1024  # a slot holds this many values at first (grown on demand)


class _Slot:
    """One host staging slot of ``cap`` int64 values and the event of its last copy."""

    __slots__ = ("host", "array", "event")

    def __init__(self, cap: int, pinned: bool, event: torch.cuda.Event | None) -> None:
        self.host = torch.empty(cap, dtype=torch.int64, pin_memory=pinned)
        self.array = self.host.numpy()
        self.event = event

    @property
    def cap(self) -> int:
        return self.host.numel()


class StagingRing:
    """``fill(n)``: a host array of ``n`` int64 values to write; ``send()``: those values on
    ``device`` (see the module docstring). ``staged`` (default: ``device`` is CUDA) copies
    through the slots, guarded by events on the stream current at construction."""

    def __init__(self, device: torch.device, *, staged: bool | None = None) -> None:
        self.device = device
        self._staged = device.type == "cuda" if staged is None else staged
        self._pinned = device.type == "cuda"
        self._stream = torch.cuda.current_stream(device) if self._staged else None
        self._slots = [self._new_slot(MIN_ENTRIES)]
        self._next = 0
        self._filled: tuple[_Slot, int] | None = None
        self._dev = torch.empty(0, dtype=torch.int64, device=device)

    def fill(self, n: int) -> np.ndarray:
        """A writable host array of ``n`` values (a slot whose previous copy has run)."""
        slot = self._slot(n)
        self._filled = (slot, n)
        return slot.array[:n]

    def send(self) -> torch.Tensor:
        """The values of the last ``fill`` on the device: one copy, queued on the stream."""
        if self._filled is None:
            raise RuntimeError("send() without a fill() before it")
        slot, n = self._filled
        self._filled = None
        if not self._staged:
            return slot.host[:n]
        if self._dev.numel() < n:
            self._dev = torch.empty(slot.cap, dtype=torch.int64, device=self.device)
        out = self._dev[:n]
        out.copy_(slot.host[:n], non_blocking=True)
        assert slot.event is not None
        slot.event.record(self._stream)
        return out

    def _new_slot(self, cap: int, event: torch.cuda.Event | None = None) -> _Slot:
        if self._staged and event is None:
            event = torch.cuda.Event()
        return _Slot(cap, self._pinned, event)

    def _slot(self, n: int) -> _Slot:
        # ``i`` is the oldest slot: busy, then so are the newer ones (their copies are queued
        # after its copy); a new slot goes in before it, as the newest.
        ring, i = self._slots, self._next
        event = ring[i].event
        if event is not None and not event.query():
            ring.insert(i, self._new_slot(max(n, MIN_ENTRIES)))
        elif ring[i].cap < n:  # its copy has run: the smaller buffer can go
            ring[i] = self._new_slot(max(n, 2 * ring[i].cap), event)
        self._next = (i + 1) % len(ring)
        return ring[i]

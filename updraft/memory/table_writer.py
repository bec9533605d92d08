"""Writes of KV slots into the request-to-token table (``ReqToTokenPool.req_to_token``).

The allocator writes the table when a row takes pages (at admission, and every few decode steps
as a row grows past its slack) and when slack is reclaimed. On CUDA a write is one packed
host-to-device copy and one scatter, queued behind the iteration in flight: a blocking copy
would wait for it. The packed entries go through reusable host staging (pinned on CUDA) and one
device buffer instead of a new tensor, a new pinned copy and a new device tensor per write.

Hazards:

* A staging slot is rewritten only once the copy that read it has run (its event): a busy slot
  is never waited for (that would wait for the iteration in flight); the ring takes a new slot
  instead, so it grows to the largest burst of writes in flight and stays there.
* The device buffer is reused by every write: the copy into it and the scatter from it are
  queued in order on the one stream, so the next copy lands after the previous scatter read it.
  The stream is the current one when the writer is made (the engine never switches streams).
* On a CPU the "device" is host memory: the staging is read in place, no copy, no event.
"""

from __future__ import annotations

import torch

_MIN_ENTRIES = 1024  # a staging slot holds this many entries at first (grown on demand)


class _Stage:
    """One host staging slot: ``[flat index | slot]`` int64 for up to ``cap`` entries."""

    __slots__ = ("host", "array", "event")

    def __init__(self, cap: int, pinned: bool, event: torch.cuda.Event | None) -> None:
        self.host = torch.empty(2 * cap, dtype=torch.int64, pin_memory=pinned)
        self.array = self.host.numpy()
        self.event = event

    @property
    def cap(self) -> int:
        return self.host.numel() // 2


class TableWriter:
    """``write(rows, cols, slots)``: ``table[rows[i], cols[i]] = slots[i]`` (see the module
    docstring). ``staged`` (default: the table is on CUDA) copies through host staging guarded
    by events on the stream current at construction."""

    def __init__(self, table: torch.Tensor, *, staged: bool | None = None) -> None:
        if not table.is_contiguous():
            raise ValueError("the request-to-token table must be contiguous (it is written by flat index)")
        self._flat = table.view(-1)
        self._width = table.shape[1]
        self._staged = table.device.type == "cuda" if staged is None else staged
        self._pinned = table.device.type == "cuda"
        self._stream = torch.cuda.current_stream(table.device) if self._staged else None
        self._ring = [self._new_stage(_MIN_ENTRIES)]
        self._next = 0
        self._dev = torch.empty(0, dtype=torch.int64, device=table.device)

    def write(self, rows: list[int], cols: list[int], slots: list[int]) -> None:
        n = len(rows)
        if not n:
            return
        stage = self._stage(n)
        a = stage.array
        a[:n] = rows
        a[:n] *= self._width
        a[:n] += cols
        a[n : 2 * n] = slots
        if self._staged:
            if self._dev.numel() < 2 * n:
                self._dev = torch.empty(2 * stage.cap, dtype=torch.int64, device=self._flat.device)
            packed = self._dev[: 2 * n]
            packed.copy_(stage.host[: 2 * n], non_blocking=True)
            assert stage.event is not None
            stage.event.record(self._stream)
        else:
            packed = stage.host[: 2 * n]
        self._flat.index_put_((packed[:n],), packed[n:].to(torch.int32))

    def _new_stage(self, cap: int, event: torch.cuda.Event | None = None) -> _Stage:
        if self._staged and event is None:
            event = torch.cuda.Event()
        return _Stage(cap, self._pinned, event)

    def _stage(self, n: int) -> _Stage:
        """A staging slot for ``n`` entries whose previous copy has run (never waits)."""
        ring, i = self._ring, self._next
        # ``i`` is the oldest slot: busy, then so are the newer ones (their copies are queued
        # after its copy); a new slot goes in before it, as the newest. Unstaged (CPU): the
        # staging is read synchronously, one slot does.
        event = ring[i].event
        if event is not None and not event.query():
            ring.insert(i, self._new_stage(max(n, _MIN_ENTRIES)))
        elif ring[i].cap < n:  # its copy has run: the smaller buffer can go
            ring[i] = self._new_stage(max(n, 2 * ring[i].cap), event)
        self._next = (i + 1) % len(ring)
        return ring[i]

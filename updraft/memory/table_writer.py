"""Writes of KV slots into the request-to-token table (``ReqToTokenPool.req_to_token``).

The allocator writes the table when a row takes pages (at admission, and every few decode steps
as a row grows past its slack) and when slack is reclaimed. On CUDA a write is one packed
host-to-device copy and one scatter, queued behind the iteration in flight: a blocking copy
would wait for it. The packed entries go through reusable host staging (``StagingRing``: pinned
slots guarded by events, one device buffer) instead of a new tensor, a new pinned copy and a new
device tensor per write. On a CPU the staging is read in place.
"""

from __future__ import annotations

import torch

from updraft.memory.staging import StagingRing


class TableWriter:
    """``write(rows, cols, slots)``: ``table[rows[i], cols[i]] = slots[i]`` (see the module
    docstring). ``staged`` (default: the table is on CUDA) copies through host staging guarded
    by events on the stream current at construction."""

    def __init__(self, table: torch.Tensor, *, staged: bool | None = None) -> None:
        if not table.is_contiguous():
            raise ValueError("the request-to-token table must be contiguous (it is written by flat index)")
        self._flat = table.view(-1)
        self._width = table.shape[1]
        self._ring = StagingRing(table.device, staged=staged)

    def write(self, rows: list[int], cols: list[int], slots: list[int]) -> None:
        n = len(rows)
        if not n:
            return
        a = self._ring.fill(2 * n)
        a[:n] = rows
        a[:n] *= self._width
        a[:n] += cols
        a[n:] = slots
        packed = self._ring.send()
        self._flat.index_put_((packed[:n],), packed[n:].to(torch.int32))

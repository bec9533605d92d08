"""Work that may run beside the current stream, inside a graph capture or eagerly.

At batch 1 a step's kernels fill few of the GPU's SMs, so two independent chains of them overlap
almost for free. ``SideStream.run(fn)`` enqueues ``fn``'s kernels on a stream of their own that
first waits for everything the current stream has enqueued so far (the fork); ``join`` makes
the current stream wait for them (the join). Under ``torch.cuda.graph`` the fork and the join
are edges of the captured graph: the side kernels depend on the last kernel before the fork,
and the first kernel after the join on the side's last one.

Hazards and conventions:

* Every ``run`` needs its ``join`` before anything reads its results and before a capture ends
  (a capture with an unjoined stream fails); a ``join`` with no ``run`` before it does nothing.
  ``run`` returns tensors allocated on the side stream (a tensor, or a tuple holding tensors);
  they are marked as used by the current stream too (``record_stream``), so the caching
  allocator never hands their memory to side-stream work while the current stream still reads
  it.
* ``fn`` must not read what the current stream writes after the fork, nor write what it reads:
  the two run concurrently.
* Off CUDA (the CPU tests, the graph emulator) there is no stream: ``run`` calls ``fn`` in
  place and ``join`` does nothing, so results are the same, only the overlap is absent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


class SideStream:
    """One side stream on ``device`` (none off CUDA), made once and reused by every fork."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._forked = False  # a ``run`` since the last ``join``

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the side stream after the current stream's work so far (see the module
        docstring); returns its result, to be read after ``join``."""
        if self.stream is None:
            return fn()
        main = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(main)
        self._forked = True
        with torch.cuda.stream(self.stream):
            out = fn()
        for t in out if isinstance(out, tuple) else (out,):
            if isinstance(t, torch.Tensor):
                t.record_stream(main)
        return out

    def join(self) -> None:
        """The current stream waits for the side stream's work since the last join, if any
        (under a capture, waiting on a side stream that took no part in it is an error)."""
        if self.stream is not None and self._forked:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
            self._forked = False

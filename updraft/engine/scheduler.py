"""Continuous batching: which requests run in the next step, and their KV.

Policy (one step is either a prefill step or a decode step):

* Prefill first. Partially prefilled requests continue, then waiting requests join in arrival
  order, up to ``chunk_size`` prompt tokens per step (long prompts are chunked). A request joins
  only if its pages fit while leaving every decoding request room for its next step.
* While requests decode, waiting ones start in groups (``admit_group``, at most a
  ``max_running / 8`` share of the slots, fewer when fewer wait): every start is a prefill step
  that pauses all decoding requests (and drains the overlapped pipeline), and a prefill of a few
  requests costs about what one does. Speculative requests finish at different steps, so
  without grouping each freed slot would cost a pause of its own.
* Otherwise decode every request whose prefill is done. When the pool cannot give each of them
  the slots for the next step (plus the speculative lookahead), the most recently admitted
  requests are preempted: their KV is freed and they go back to the front of the queue with
  their output so far, to be recomputed. Nothing is ever dropped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from updraft.batch import ForwardMode
from updraft.engine.request import Request, RequestStatus
from updraft.memory.pools import PagedAllocator, ReqToTokenPool


@dataclass
class ScheduledBatch:
    mode: ForwardMode  # EXTEND or DECODE
    reqs: list[Request]
    extend_lens: list[int]  # new tokens per request
    samples: list[bool]  # whether the request samples a token after this step


class Scheduler:
    def __init__(
        self,
        req_pool: ReqToTokenPool,
        allocator: PagedAllocator,
        max_running: int,
        chunk_size: int,
        lookahead: int = 0,
        *,
        admit_group: int = 1,
    ) -> None:
        self.req_pool = req_pool
        self.allocator = allocator
        self.max_running = max_running
        self.chunk_size = chunk_size
        #: KV positions a decoding request needs beyond its current length (speculative steps).
        self.lookahead = lookahead
        #: free slots that open admission while requests decode (see the module docstring)
        self.admit_group = max(1, min(admit_group, max_running // 8))
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order

    # ---- bookkeeping -------------------------------------------------------------------
    def add(self, req: Request) -> None:
        req.status = RequestStatus.WAITING
        self.waiting.append(req)

    def release(self, req: Request) -> None:
        """Free the request's KV and row and drop it from the queues (finish or abort)."""
        self.free_kv(req)
        self.retire(req)

    def free_kv(self, req: Request) -> None:
        """Free the request's KV pages and row (exactly once; a second call does nothing)."""
        if req.row is not None:
            self.allocator.free(req.row)
            self.req_pool.free(req.row)
            req.row = None

    def can_admit(self) -> bool:
        """Whether the next schedule could start a waiting request (enough free rows under
        ``max_running`` for a group, or nothing decoding); KV room is checked when it is
        scheduled."""
        if not self.waiting:
            return False
        free = min(self.req_pool.num_free, self.max_running - len(self.running))
        if free <= 0:
            return False
        if all(r.in_prefill for r in self.running):
            return True  # nothing would be paused
        return free >= min(self.admit_group, len(self.waiting))

    def decode_fits(self) -> bool:
        """Whether every decoding request gets its next step's KV without a preemption."""
        decoding = [r for r in self.running if not r.in_prefill]
        return self._decode_pages(decoding) <= self.allocator.num_free_pages

    def _decode_pages(self, decoding: list[Request]) -> int:
        la = self.lookahead
        return self.allocator.pages_needed_batch([r.row for r in decoding], [r.seq_len + la for r in decoding])  # type: ignore[misc]

    def retire(self, req: Request) -> None:
        """Drop the request from the queues, keeping its KV (an iteration in flight still writes
        it; the engine frees it once that iteration is done)."""
        if req in self.running:
            self.running.remove(req)
        try:
            self.waiting.remove(req)
        except ValueError:
            pass

    def preempt(self, req: Request) -> None:
        """Free a running request's KV; it goes back to the front of the queue to be recomputed."""
        self.release(req)
        req.num_computed = 0
        req.in_prefill = True
        req.num_preemptions += 1
        req.status = RequestStatus.WAITING
        self.waiting.appendleft(req)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    def decode_len(self, req: Request) -> int:
        """KV positions a decoding request needs for its next step."""
        return req.seq_len + self.lookahead

    # ---- the policy --------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch | None:
        while True:
            batch = self._schedule_prefill() or self._schedule_decode()
            if batch is not None or len(self.running) <= 1:
                return batch
            # Nothing can advance (partial prefills and decoders hold each other's pages):
            # recompute the newest request later so the others make progress.
            self.preempt(self.running[-1])

    def _schedule_prefill(self) -> ScheduledBatch | None:
        candidates = [r for r in self.running if r.in_prefill] + list(self.waiting)
        if not candidates:
            return None
        budget = self.chunk_size
        reserve = self._decode_pages([r for r in self.running if not r.in_prefill])
        reqs: list[Request] = []
        lens: list[int] = []
        samples: list[bool] = []
        admit = self.can_admit()
        for req in candidates:
            if budget <= 0:
                break
            if req.row is None and not admit:
                break  # wait until a group's worth of rows is free
            remaining = req.seq_len - req.num_computed
            n = min(remaining, budget)
            finishes = n == remaining
            new_len = req.num_computed + n + (self.lookahead if finishes else 0)
            if req.row is None and (self.req_pool.num_free == 0 or len(self.running) >= self.max_running):
                break  # arrival order: later requests do not overtake
            pages = self.allocator.pages_needed(req.row, new_len)
            if pages > self.allocator.num_free_pages - reserve:
                break
            if req.row is None:
                row = self.req_pool.alloc()
                assert row is not None
                req.row = row
                self.waiting.remove(req)
                self.running.append(req)
                req.status = RequestStatus.RUNNING
            ok = self.allocator.ensure(req.row, new_len)
            assert ok, "page accounting out of sync"
            reqs.append(req)
            lens.append(n)
            samples.append(finishes)
            budget -= n
        if not reqs:
            return None
        return ScheduledBatch(ForwardMode.EXTEND, reqs, lens, samples)

    def _schedule_decode(self) -> ScheduledBatch | None:
        decoding = [r for r in self.running if not r.in_prefill]
        la = self.lookahead
        while decoding:
            rows = [r.row for r in decoding]
            lens = [r.seq_len + la for r in decoding]
            if self.allocator.ensure_batch(rows, lens):  # type: ignore[arg-type]
                n = len(decoding)
                return ScheduledBatch(ForwardMode.DECODE, decoding, [1] * n, [True] * n)
            if len(decoding) == 1:
                # A lone request always fits (the engine caps the context at the pool size), so
                # a prefilling request holds the pages; `schedule` resolves that.
                return None
            victim = decoding.pop()  # newest admitted
            self.preempt(victim)
        return None

"""The engine thread: the only thread that touches the :class:`~updraft.engine.engine.Engine`.

HTTP handlers run on the asyncio loop of the server; the engine runs its step loop on one
dedicated thread. They meet in two places only:

* Inbox (HTTP -> engine): a ``queue.SimpleQueue`` of commands (add a group of requests, abort,
  stop). ``submit``/``abort`` never wait for the engine; the engine thread drains the whole inbox
  between two steps and blocks on it only while it has nothing to run.
* Outbox (engine -> HTTP): each submitted group owns an unbounded ``asyncio.Queue`` on the
  server's loop. After a step the engine thread hands every output of that step to the loop with
  ONE ``loop.call_soon_threadsafe`` per loop, which enqueues with ``put_nowait``. Neither call can
  block, so a slow or vanished client never stalls the step loop; its outputs pile up in its own
  queue until its handler reads them or is garbage collected.

The engine thread produces token ids only (``add_request(detokenize=False)``): detokenisation and
stop strings run on the HTTP side (``updraft.server.generation``), off the step loop.

Failure model: a request whose forward raises fails alone inside ``Engine.step`` (an ``error``
output). Anything else that escapes the loop kills the thread: it marks itself dead, answers
every group it knows with :class:`EngineDead` and rejects whatever is still in the inbox. A lock
orders ``submit`` against death and shutdown, so a command is either seen by the thread or
refused at once; nobody waits forever on a dead engine.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from updraft.engine.engine import Engine
from updraft.engine.request import StepOutput
from updraft.sampling_params import SamplingParams
from updraft.spec.stats import SpecStats

logger = logging.getLogger("updraft.server")

IDLE_WAIT_S = 0.25  # how long the idle engine thread blocks on the inbox before re-checking
SNAPSHOT_INTERVAL_S = 0.005  # least time between two snapshots while busy


class EngineUnavailable(Exception):
    """The engine thread is dead or shutting down; the HTTP answer is 503."""


# ---- items delivered to a group's asyncio queue ---------------------------------------------
@dataclass(slots=True)
class Admitted:
    """Every child of the group is queued in the engine (always the first item of a group)."""


@dataclass(slots=True)
class Rejected:
    """The engine refused the group; nothing of it is queued. ``status`` 400: bad input the
    engine caught itself (``ValueError``); 500: anything else ``add_request`` raised."""

    message: str
    status: int = 400


@dataclass(slots=True)
class Delta:
    """New tokens of one child. ``finish_reason`` is set on the child's last delta.

    ``num_drafts``/``num_accepted`` are the child's cumulative speculative counters (verify
    steps, accepted drafts), so the HTTP side knows the accept length at any point.
    """

    index: int
    token_ids: list[int]
    logprobs: list[dict[str, Any]]
    finish_reason: str | None
    error: str | None
    num_drafts: int
    num_accepted: int


@dataclass(slots=True)
class EngineDead:
    """The engine thread died; the group will get nothing more."""

    message: str


Item = Admitted | Rejected | Delta | EngineDead


# ---- commands (HTTP -> engine) ----------------------------------------------------------------
@dataclass(slots=True)
class Child:
    """One engine request of a group (the engine takes n=1; the server fans out n and prompts)."""

    request_id: str
    index: int
    prompt_ids: list[int]
    params: SamplingParams


@dataclass(eq=False)
class Group:
    """The children of one HTTP request and where their outputs go."""

    children: list[Child]
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Any]  # gets Items; its owner may put its own sentinels too
    inject: str | None = None  # test-only fault injection: "forward" or "engine_crash"


@dataclass(slots=True)
class _Abort:
    request_ids: list[str]


@dataclass(slots=True)
class _Stop:
    pass


@dataclass(frozen=True)
class EngineSnapshot:
    """Engine counters as of the engine thread's last iteration (immutable; read from any
    thread). Counters are cumulative since start."""

    time: float = 0.0
    num_running: int = 0
    num_waiting: int = 0
    kv_used_tokens: int = 0
    kv_capacity_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = field(default_factory=tuple)
    #: (S, fused iterations that ran with S drafts), adaptive speculation's choices
    chosen_steps: tuple[tuple[int, int], ...] = field(default_factory=tuple)

    @property
    def kv_usage(self) -> float:
        return self.kv_used_tokens / max(1, self.kv_capacity_tokens)


class EngineThread:
    """Owns an :class:`Engine` and runs its step loop on a dedicated daemon thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._inbox: queue.SimpleQueue[Group | _Abort | _Stop] = queue.SimpleQueue()
        self._lock = threading.Lock()  # orders submit() against death and shutdown
        self._dead: str | None = None
        self._stopping = False
        # Engine-thread state: request id -> (group, child index).
        self._routes: dict[str, tuple[Group, int]] = {}
        self._groups_by_loop: dict[
            asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[Any], Item]]
        ] = {}
        self._last_snapshot = 0.0
        self.snapshot = EngineSnapshot(kv_capacity_tokens=engine.kv_capacity_tokens)
        self._thread = threading.Thread(target=self._main, name="updraft-engine", daemon=True)

    # ---- any thread -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def dead_reason(self) -> str | None:
        """Why the engine thread died, or None while it is healthy (or stopped on request)."""
        return self._dead

    @property
    def stopping(self) -> bool:
        return self._stopping

    def submit(self, group: Group) -> None:
        """Queue a group; its asyncio queue gets ``Admitted`` or ``Rejected`` first. Raises
        :class:`EngineUnavailable` when the engine is dead or shutting down."""
        with self._lock:
            if self._dead is not None:
                raise EngineUnavailable(f"the engine is not running: {self._dead}")
            if self._stopping:
                raise EngineUnavailable("the server is shutting down")
            self._inbox.put(group)

    def abort(self, request_ids: list[str]) -> None:
        """Abort requests (unknown or finished ids are ignored). Never blocks."""
        if request_ids:
            self._inbox.put(_Abort(list(request_ids)))

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Abort everything still running, stop the thread and wait up to ``timeout`` seconds
        for it. Returns whether it stopped (a step stuck in a kernel may outlive the wait; the
        thread is a daemon, so it never keeps the process alive)."""
        with self._lock:
            self._stopping = True
        self._inbox.put(_Stop())
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ---- the engine thread ------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - anything escaping the loop kills the engine
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            logger.error("engine thread died: %s", msg, exc_info=exc)
            self._die(msg)

    def _loop(self) -> None:
        engine = self.engine
        while True:
            busy = engine.has_unfinished()
            got, stop = self._drain_inbox(block=not busy)
            if stop:
                self._abort_all()
                self._publish(force=True)
                self._flush()
                return
            if engine.has_unfinished():
                self._route(engine.step())
            self._publish(force=got)
            self._flush()

    def _drain_inbox(self, block: bool) -> tuple[bool, bool]:
        """Apply every queued command. Returns (whether any came, whether to stop)."""
        got = False
        try:
            cmd = self._inbox.get(timeout=IDLE_WAIT_S) if block else self._inbox.get_nowait()
        except queue.Empty:
            return False, False
        while True:
            got = True
            if isinstance(cmd, _Stop):
                return True, True
            if isinstance(cmd, _Abort):
                for rid in cmd.request_ids:
                    self.engine.abort(rid)
            else:
                self._add(cmd)
            try:
                cmd = self._inbox.get_nowait()
            except queue.Empty:
                return got, False

    def _add(self, group: Group) -> None:
        added: list[str] = []
        try:
            for child in group.children:
                self.engine.add_request(
                    child.prompt_ids, child.params, child.request_id, detokenize=False
                )
                added.append(child.request_id)
                self._routes[child.request_id] = (group, child.index)
        except Exception as exc:  # noqa: BLE001 - refuse this group, keep the engine running
            for rid in added:
                self.engine.abort(rid)  # its final output is released unrouted in _route
                self._routes.pop(rid, None)
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            # ValueError (RequestError and friends) is a one-line user error.
            self._post(group, Rejected(msg, 400 if isinstance(exc, ValueError) else 500))
            return
        if group.inject == "forward":
            self.engine.inject_failure(group.children[0].request_id)
        self._post(group, Admitted())
        if group.inject == "engine_crash":
            raise RuntimeError("injected engine crash")

    def _route(self, outs: list[StepOutput]) -> None:
        for out in outs:
            route = self._routes.get(out.request_id)
            req = self.engine.requests.get(out.request_id)
            if out.finished:
                self._routes.pop(out.request_id, None)
                self.engine.release_finished(out.request_id)
            if route is None:
                continue
            group, index = route
            # The token and logprob lists are fresh per step and never touched again by the
            # engine, so they cross to the server loop without a copy.
            spec = req.spec if req is not None else SpecStats()
            delta = Delta(
                index,
                out.new_token_ids,
                out.new_logprobs,
                out.finish_reason if out.finished else None,
                out.error,
                spec.num_drafts,
                spec.num_accepted_tokens,
            )
            self._post(group, delta)

    def _abort_all(self) -> None:
        for rid in list(self._routes):
            self.engine.abort(rid)
        self._route(self.engine.step())  # no forward runs for aborted requests; drains outputs

    def _post(self, group: Group, item: Item) -> None:
        self._groups_by_loop.setdefault(group.loop, []).append((group.queue, item))

    def _flush(self) -> None:
        """Hand this iteration's items to their loops: one non-blocking call per loop."""
        pending, self._groups_by_loop = self._groups_by_loop, {}
        for loop, items in pending.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                pass

    def _publish(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last_snapshot < SNAPSHOT_INTERVAL_S:
            return
        self._last_snapshot = now
        e = self.engine
        spec = SpecStats()
        # Finished requests are merged into e.spec_stats at finish; add the live ones.
        spec.merge(e.spec_stats)
        for req in e.requests.values():
            if not req.finished:
                spec.merge(req.spec)
        self.snapshot = EngineSnapshot(
            time=now,
            num_running=e.num_running,
            num_waiting=e.num_waiting,
            kv_used_tokens=e.allocator.used_tokens,
            kv_capacity_tokens=e.kv_capacity_tokens,
            prompt_tokens=e.stats.prompt_tokens,
            generation_tokens=e.stats.generated_tokens,
            num_drafts=spec.num_drafts,
            num_draft_tokens=spec.num_draft_tokens,
            num_accepted_tokens=spec.num_accepted_tokens,
            accepted_per_pos=tuple(spec.accepted_per_pos),
            chosen_steps=tuple(sorted(_chosen_steps(e).items())),
        )

    def _die(self, msg: str) -> None:
        with self._lock:
            self._dead = msg
        groups = {id(g): g for g, _ in self._routes.values()}
        while True:  # commands that raced with death: refuse them
            try:
                cmd = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(cmd, Group):
                groups[id(cmd)] = cmd
        for g in groups.values():
            self._post(g, EngineDead(msg))
        self._routes.clear()
        self._flush()


def _deliver(items: list[tuple[asyncio.Queue[Any], Item]]) -> None:
    # Runs on the server loop. Queues are unbounded: put_nowait never raises QueueFull.
    for q, item in items:
        q.put_nowait(item)


def _chosen_steps(e: Engine) -> Counter[int]:
    """S -> speculative iterations that ran with S drafts, fused and per-phase together."""
    out: Counter[int] = Counter(e.driver.chosen_steps() if e.driver is not None else {})
    if e.spec is not None:
        out.update(e.spec.adaptive.chosen)
    return out

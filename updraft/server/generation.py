"""One HTTP request's generation, on the server loop: submission of its engine requests, then
detokenisation and stop strings as token ids come back.

Why detokenise here and not on the engine thread: the engine step loop is the throughput
bottleneck; decoding text and matching stop strings for every token of every request would
sit on it. Here it runs on the HTTP loop, overlapped with the next step (which spends most of
its time in torch with the GIL released).

Stop strings stay exact: each child feeds the tokens of each delta through the same
``TextStream`` the engine uses offline (one decode per delta; token by token only when a stop
string completes inside it), so the text is the same character for character. When a stop string matches, the child is finished right there: its
text is cut at the match, the token ids (and logprobs) after the token that completed it are
dropped, nothing after it is ever sent, and the engine request is aborted. The engine may have
computed a step or two past the stop by then; that work is discarded (its KV is freed by the
abort) and not counted in ``usage``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from updraft.engine.detokenizer import TextStream
from updraft.sampling_params import SamplingParams
from updraft.server.engine_thread import (
    Admitted,
    Child,
    Delta,
    EngineDead,
    EngineUnavailable,
    Group,
    Item,
    Rejected,
)
from updraft.server.protocol import APIError
from updraft.server.state import ServerState


@dataclass
class ChoiceUpdate:
    """New output of one choice since the previous update (text, token ids, logprobs)."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None

    def merge(self, other: ChoiceUpdate) -> None:
        self.text += other.text
        self.token_ids += other.token_ids
        self.logprobs += other.logprobs
        self.finish_reason = other.finish_reason or self.finish_reason
        self.error = other.error or self.error


@dataclass
class _ChoiceState:
    request_id: str
    index: int
    prompt_len: int
    text: TextStream
    num_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    first_token_time: float | None = None
    num_drafts: int = 0
    num_accepted: int = 0


class _Wake:
    """Queue sentinel that only wakes ``updates()``."""


_WAKE = _Wake()


def unavailable(message: str) -> APIError:
    return APIError(503, message, kind="service_unavailable_error", code="engine_unavailable")


class Generation:
    """The choices of one HTTP request: ``n`` per prompt, choice index ``prompt * n + j``.

    Use: ``await start()`` (raises :class:`APIError` 400/503), then ``await updates()`` until
    ``finished``; call ``abort()`` when the client goes away (idempotent, safe after finish).
    """

    def __init__(
        self,
        state: ServerState,
        prompts: list[list[int]],
        params: SamplingParams,
        n: int,
        arrival: float,
        inject: str | None = None,
        prompt_param: str = "prompt",
    ) -> None:
        self.state = state
        self._prompt_param = prompt_param  # the request field named when the engine refuses
        self.arrival = arrival
        self.prompt_lens = [len(p) for p in prompts]
        # Unbounded, so the engine thread's put_nowait never fails or waits.
        self._queue: asyncio.Queue[Item | _Wake] = asyncio.Queue()
        self._inject = inject
        self._pending_admission = 0
        base = uuid.uuid4().hex
        tok = state.tokenizer
        self.choices: list[_ChoiceState] = []
        children: list[Child] = []
        for i, ids in enumerate(prompts):
            for j in range(n):
                index = i * n + j
                seed = None if params.seed is None else (params.seed + j) % (1 << 63)
                rid = f"{base}-{index}"
                children.append(Child(rid, index, ids, replace(params, n=1, seed=seed)))
                self.choices.append(
                    _ChoiceState(
                        rid,
                        index,
                        len(ids),
                        TextStream(tok, ids, params.skip_special_tokens, params.stop,
                                   params.include_stop_str_in_output),
                    )
                )
        self._children = children

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Submit every choice to the engine and wait until it has queued them."""
        group = Group(self._children, asyncio.get_running_loop(), self._queue, self._inject)
        try:
            self.state.engine_thread.submit(group)
        except EngineUnavailable as exc:
            raise unavailable(str(exc)) from None
        self._pending_admission = len(self._children)
        self.state.pending_admission += self._pending_admission
        try:
            first = await self._queue.get()
        except BaseException:  # cancelled while waiting (client gone): do not leave orphans
            self._admitted()
            self.abort()
            raise
        self._admitted()
        if isinstance(first, Rejected):
            for c in self.choices:
                c.finish_reason = "abort"
            if first.status == 400:
                raise APIError(400, first.message, param=self._prompt_param, code="invalid_value")
            raise APIError(
                first.status,
                f"cannot queue the request: {first.message}",
                kind="server_error",
                code="internal_error",
            )
        if isinstance(first, EngineDead):
            self._fail_all(first.message)
            raise unavailable(f"the engine is not running: {first.message}")
        assert isinstance(first, Admitted), first

    def _admitted(self) -> None:
        self.state.pending_admission -= self._pending_admission
        self._pending_admission = 0

    @property
    def finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.choices)

    def interrupt(self) -> None:
        """Abort, and wake a task blocked in ``updates()`` (it returns what it has)."""
        self.abort()
        self._queue.put_nowait(_WAKE)

    def abort(self) -> None:
        """Abort every unfinished choice (client gone, another choice failed, shutdown)."""
        rids = [c.request_id for c in self.choices if c.finish_reason is None]
        for c in self.choices:
            if c.finish_reason is None:
                self._finish(c, "abort")
        self.state.engine_thread.abort(rids)

    # ---- outputs ---------------------------------------------------------------------------
    async def updates(self) -> list[ChoiceUpdate]:
        """Wait for output, then return everything available, merged per choice (index order).
        Raises :class:`APIError` 503 if the engine dies."""
        items = [await self._queue.get()]
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        merged: dict[int, ChoiceUpdate] = {}
        for item in items:
            if isinstance(item, EngineDead):
                self._fail_all(item.message)
                raise unavailable(f"the engine died: {item.message}")
            if not isinstance(item, Delta):
                continue
            upd = self._apply(item)
            if upd is None:
                continue
            if upd.index in merged:
                merged[upd.index].merge(upd)
            else:
                merged[upd.index] = upd
        return [merged[i] for i in sorted(merged)]

    def _apply(self, d: Delta) -> ChoiceUpdate | None:
        c = self.choices[d.index]
        if c.finish_reason is not None:  # finished here already (stop string, abort): late output
            return None
        c.num_drafts, c.num_accepted = d.num_drafts, d.num_accepted
        if d.token_ids and c.first_token_time is None:
            c.first_token_time = time.perf_counter()
        upd = ChoiceUpdate(d.index)
        upd.text, stop_at = c.text.feed(d.token_ids)
        stopped = stop_at is not None
        keep = len(d.token_ids) if stop_at is None else stop_at + 1
        upd.token_ids = list(d.token_ids[:keep])
        upd.logprobs = list(d.logprobs[:keep])
        c.num_tokens += len(upd.token_ids)
        if stopped:
            if d.finish_reason is None:
                self.state.engine_thread.abort([c.request_id])
            upd.finish_reason = "stop"
        elif d.finish_reason is not None:
            if d.finish_reason in ("stop", "length"):
                # As the engine does: an unfinished final character still counts, and may
                # itself complete a stop string.
                upd.text += c.text.finish()
            upd.finish_reason = d.finish_reason
            upd.error = d.error
        if upd.finish_reason is not None:
            c.error = upd.error
            self._finish(c, upd.finish_reason)
        return upd

    def _finish(self, c: _ChoiceState, reason: str) -> None:
        c.finish_reason = reason
        now = time.perf_counter()
        ttft = c.first_token_time - self.arrival if c.first_token_time is not None else None
        tpot = None
        if c.first_token_time is not None and c.num_tokens > 1:
            tpot = (now - c.first_token_time) / (c.num_tokens - 1)
        self.state.metrics.observe_finish(reason, ttft, tpot, now - self.arrival)

    def _fail_all(self, message: str) -> None:
        for c in self.choices:
            if c.finish_reason is None:
                c.error = message
                self._finish(c, "error")

    # ---- usage -----------------------------------------------------------------------------
    def usage(self) -> dict[str, Any]:
        """OpenAI usage plus ``acceptance_length`` (mean tokens per verify step, counting the
        bonus token, over all choices) when speculation ran."""
        prompt = sum(self.prompt_lens)
        completion = sum(c.num_tokens for c in self.choices)
        out: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        drafts = sum(c.num_drafts for c in self.choices)
        if drafts:
            out["acceptance_length"] = round(
                (drafts + sum(c.num_accepted for c in self.choices)) / drafts, 4
            )
        return out

"""OpenAI response pieces: logprobs in both formats, SSE framing, and the two ways a request
runs to its end (``stream_sse`` for ``stream: true``, ``collect`` otherwise).

Both end every path with the request's choices aborted (a no-op once they finished), so a
client that goes away, a failed choice or a server shutdown never leaves work in the engine.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from updraft.server.generation import ChoiceUpdate, Generation
from updraft.server.protocol import APIError
from updraft.server.state import ServerState

MIN_LOGPROB = -9999.0  # JSON has no -inf: a token with zero probability reports this


# ---- logprobs ---------------------------------------------------------------------------------
def _lp(x: float) -> float:
    return x if math.isfinite(x) else MIN_LOGPROB


def completion_logprobs(state: ServerState, upd: ChoiceUpdate, offset: int) -> dict[str, Any]:
    """Legacy completions format; ``offset`` is the text offset of the update's first token."""
    tokens: list[str] = []
    token_lps: list[float] = []
    tops: list[dict[str, float]] = []
    offsets: list[int] = []
    for e in upd.logprobs:
        s = state.token_str(int(e["token_id"]))
        tokens.append(s)
        token_lps.append(_lp(float(e["logprob"])))
        top: dict[str, float] = {}
        for t, v in e.get("top") or []:  # best first; tokens whose text collides keep the best
            top.setdefault(state.token_str(int(t)), _lp(float(v)))
        tops.append(top or {s: _lp(float(e["logprob"]))})
        offsets.append(offset)
        offset += len(s)
    return {
        "tokens": tokens,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def chat_logprobs(state: ServerState, upd: ChoiceUpdate) -> dict[str, Any]:
    def entry(token_id: int, lp: float) -> dict[str, Any]:
        s = state.token_str(token_id)
        return {"token": s, "logprob": _lp(lp), "bytes": list(s.encode("utf-8"))}

    content = []
    for e in upd.logprobs:
        item = entry(int(e["token_id"]), float(e["logprob"]))
        item["top_logprobs"] = [entry(int(t), float(v)) for t, v in e.get("top") or []]
        content.append(item)
    return {"content": content}


# ---- responses ------------------------------------------------------------------------------
def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def error_event(err: APIError) -> bytes:
    return sse(err.body())


class SSEResponse(StreamingResponse):
    """SSE stream whose choices are aborted however the response ends (client gone, server
    shutdown cancelling the task, or normal end: then the abort is a no-op)."""

    def __init__(self, content: AsyncIterator[bytes], gen: Generation) -> None:
        super().__init__(
            content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
        self._gen = gen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._gen.abort()


def failure(upd: ChoiceUpdate) -> APIError:
    return APIError(
        500,
        f"generation failed: {upd.error or 'internal error'}",
        kind="server_error",
        code="generation_failed",
    )


async def collect(gen: Generation, request: Request) -> dict[int, ChoiceUpdate]:
    """Run a non-streaming request to the end; a client disconnect aborts it."""
    acc = {c.index: ChoiceUpdate(c.index) for c in gen.choices}

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gen.interrupt()

    watcher = asyncio.ensure_future(watch())
    try:
        while not gen.finished:
            for upd in await gen.updates():
                if upd.finish_reason == "error":
                    gen.abort()
                    raise failure(upd)
                acc[upd.index].merge(upd)
    finally:
        watcher.cancel()
    return acc


async def stream_sse(
    gen: Generation,
    chunk: Callable[[ChoiceUpdate], dict[str, Any] | None],
    head: list[bytes],
    usage_chunk: dict[str, Any] | None,
) -> AsyncIterator[bytes]:
    try:
        for b in head:
            yield b
        while not gen.finished:
            try:
                ups = await gen.updates()
            except APIError as exc:
                yield error_event(exc)
                return
            out = []
            for upd in ups:
                if upd.finish_reason == "error":
                    gen.abort()
                    yield b"".join(out) + error_event(failure(upd))
                    return
                c = chunk(upd)
                if c is not None:
                    out.append(sse(c))
            if out:
                yield b"".join(out)
        if usage_chunk is not None:
            usage_chunk["usage"] = gen.usage()
            yield sse(usage_chunk)
        yield b"data: [DONE]\n\n"
    finally:
        gen.abort()  # no-op once finished

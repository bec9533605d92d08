"""The FastAPI application: routes, OpenAI-style errors, lifespan (engine thread, stats log).

``build_app(engine, settings)`` wraps an already loaded :class:`Engine`; the app's lifespan
starts the engine thread and stops it (aborting what is left) at shutdown. Every error,
including FastAPI's own (unknown route, wrong method) and pydantic's, is answered in OpenAI's
``{"error": {...}}`` shape; bad input is always a 400, never a 422 or a 500.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from updraft.engine.engine import Engine
from updraft.server import serving
from updraft.server.engine_thread import EngineSnapshot
from updraft.server.metrics import CONTENT_TYPE
from updraft.server.protocol import APIError
from updraft.server.settings import ServerSettings
from updraft.server.state import ServerState

logger = logging.getLogger("updraft.server")


def engine_description(engine: Engine, settings: ServerSettings) -> list[str]:
    """Startup lines, SGLang/vLLM style: what is served and with how much memory."""
    spec = engine.config.speculative
    if spec is None:
        spec_line = "speculative decoding: off"
    else:
        draft = f", draft={spec.draft_model}" if spec.draft_model else ""
        spec_line = (
            f"speculative decoding: method={spec.method}, num_steps={spec.num_steps}, "
            f"num_draft_tokens={spec.ndt}, topk={spec.topk}, draft_extend={spec.draft_extend}{draft}"
        )
    return [
        f"model={engine.config.model!r} served as {settings.served_model_name!r}, "
        f"dtype={str(engine.dtype).removeprefix('torch.')}, device={engine.device}, "
        f"attention_backend={engine.backend_name}",
        spec_line,
        f"KV cache: {engine.kv_capacity_tokens} tokens (page size {engine.config.page_size}), "
        f"max context {engine.max_model_len} tokens, max running requests {engine.config.max_running_requests}, "
        f"chunked prefill {engine.config.chunked_prefill_size} tokens, max queue {settings.max_queue}",
    ]


async def _stats_logger(state: ServerState, interval: float) -> None:
    """Every ``interval`` seconds while there is activity: running/queued requests, generation
    throughput, KV usage and the mean accept length over the interval."""
    prev: EngineSnapshot = state.engine_thread.snapshot
    prev_t = time.perf_counter()
    while True:
        await asyncio.sleep(interval)
        s = state.engine_thread.snapshot
        now = time.perf_counter()
        gen = s.generation_tokens - prev.generation_tokens
        queued = state.queued()
        if gen or s.num_running or queued or s.prompt_tokens != prev.prompt_tokens:
            drafts = s.num_drafts - prev.num_drafts
            accept = (
                f"{(drafts + s.num_accepted_tokens - prev.num_accepted_tokens) / drafts:.2f}"
                if drafts
                else "n/a"
            )
            logger.info(
                "#running-req: %d, #queue-req: %d, gen throughput (token/s): %.1f, KV usage: %.1f%% (%d tokens), "
                "accept len: %s",
                s.num_running,
                queued,
                gen / max(now - prev_t, 1e-9),
                100 * s.kv_usage,
                s.kv_used_tokens,
                accept,
            )
        prev, prev_t = s, now


def _error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def build_app(engine: Engine, settings: ServerSettings | None = None) -> FastAPI:
    """The OpenAI-compatible app over ``engine`` (which must not be stepped by anyone else)."""
    settings = settings or ServerSettings()
    state = ServerState(engine, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.engine_thread.start()
        task = (
            asyncio.create_task(_stats_logger(state, settings.log_interval_s))
            if settings.log_interval_s > 0
            else None
        )
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
            stopped = await asyncio.to_thread(state.engine_thread.shutdown, 5.0)
            if not stopped:
                logger.warning("the engine thread did not stop within 5 s; exiting without it")

    app = FastAPI(title="updraft", lifespan=lifespan)
    app.state.server = state

    _add_error_handlers(app)
    _add_routes(app, state, engine)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every failure answers in the OpenAI error shape (``{"error": {...}}``)."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        loc = [str(p) for p in (errs[0].get("loc", ()) if errs else ()) if p != "body"]
        msg = errs[0].get("msg", "invalid request") if errs else "invalid request"
        return _error_response(
            APIError(
                400, f"{'.'.join(loc)}: {msg}" if loc else str(msg), param=".".join(loc) or None
            )
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        err = APIError(exc.status_code, str(exc.detail), kind=kind, code=str(exc.status_code))
        err.headers = dict(exc.headers or {})
        return _error_response(err)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("internal error on %s %s", request.method, request.url.path)
        return _error_response(
            APIError(
                500,
                f"internal error: {type(exc).__name__}",
                kind="server_error",
                code="internal_error",
            )
        )


def _add_routes(app: FastAPI, state: ServerState, engine: Engine) -> None:
    """The OpenAI endpoints, /health and /metrics."""
    settings = state.settings

    @app.post("/v1/completions")
    async def create_completion(request: Request) -> Response:
        return await serving.completions(state, await request.body(), request)

    @app.post("/v1/chat/completions")
    async def create_chat_completion(request: Request) -> Response:
        return await serving.chat_completions(state, await request.body(), request)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": settings.served_model_name,
                    "object": "model",
                    "created": state.created,
                    "owned_by": "updraft",
                    "root": engine.config.model,
                    "max_model_len": state.max_model_len,
                }
            ],
        }

    @app.get("/health")
    async def health() -> Response:
        et = state.engine_thread
        if et.dead_reason is not None:
            return _error_response(
                APIError(
                    503,
                    f"the engine is not running: {et.dead_reason}",
                    kind="service_unavailable_error",
                    code="engine_dead",
                )
            )
        if et.stopping:
            return _error_response(
                APIError(
                    503,
                    "the server is shutting down",
                    kind="service_unavailable_error",
                    code="shutting_down",
                )
            )
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

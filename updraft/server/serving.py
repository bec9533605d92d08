"""``/v1/completions`` and ``/v1/chat/completions``: request -> engine requests -> OpenAI responses.

Flow of one request (all on the server loop; nothing here blocks the engine thread):
parse and validate (400 on bad input) -> tokenise in a worker thread (chat template + encode)
-> check the context and the admission queue (503 + Retry-After when full) -> submit the
choices (``Generation.start``) -> stream SSE chunks or collect one JSON body.

Failures after submission: a choice whose forward raised fails the request (non-streaming: 500;
streaming: an ``error`` event, then the stream closes) and the other choices are aborted; a
dead engine gives 503 (or an error event). A client that disconnects aborts its choices, which
frees their KV at the engine's next iteration.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from updraft.sampling_params import SamplingParams
from updraft.server.generation import ChoiceUpdate, Generation
from updraft.server.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    bad_request,
    validation_error,
)
from updraft.server.responses import (
    SSEResponse,
    chat_logprobs,
    collect,
    completion_logprobs,
    sse,
    stream_sse,
)
from updraft.server.settings import FAULT_HEADER, FAULTS
from updraft.server.state import ServerState


# ---- request -> engine inputs -------------------------------------------------------------
def parse(model: type[CompletionRequest] | type[ChatCompletionRequest], body: bytes) -> Any:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def check_common(state: ServerState, req: CompletionRequest | ChatCompletionRequest) -> None:
    if req.model is not None and req.model != state.settings.served_model_name:
        raise APIError(
            400,
            f"model {req.model!r} is not served here; this server serves {state.settings.served_model_name!r}",
            param="model",
            code="model_not_found",
        )
    if req.logit_bias:
        raise bad_request("logit_bias is not supported", "logit_bias", "unsupported_parameter")
    if req.stream_options is not None and not req.stream:
        raise bad_request("stream_options is only allowed when stream is true", "stream_options")
    bad = [t for t in req.stop_token_ids or [] if t >= state.vocab_size]
    if bad:
        raise bad_request(
            f"stop_token_ids: token id {bad[0]} is outside the vocabulary [0, {state.vocab_size})",
            "stop_token_ids",
        )


def max_tokens_for(
    state: ServerState,
    prompt_lens: list[int],
    requested: int | None,
    explicit: bool,
    prompt_param: str,
    param: str,
) -> int:
    """Tokens to generate: the request's value, checked against the context (prompt + output
    must fit in ``max_model_len``); the room left when unset (or when only a default was given)."""
    longest = max(prompt_lens)
    ctx = state.max_model_len
    if longest >= ctx:
        raise bad_request(
            f"{prompt_param} has {longest} tokens but the context is {ctx} tokens "
            "(the prompt must leave room for at least one generated token)",
            prompt_param,
            "context_length_exceeded",
        )
    room = ctx - longest
    if requested is None:
        return room
    if not explicit:
        return min(requested, room)
    if requested > room:
        raise bad_request(
            f"{param}={requested} is too large: the prompt has {longest} tokens and the context is {ctx} "
            f"tokens, so at most {room} tokens can be generated",
            param,
            "context_length_exceeded",
        )
    return requested


def sampling_params(
    req: CompletionRequest | ChatCompletionRequest, max_tokens: int, logprobs: int | None
) -> SamplingParams:
    p = SamplingParams(
        n=1,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=-1 if req.top_k is None else req.top_k,
        min_p=0.0 if req.min_p is None else req.min_p,
        seed=req.seed,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        frequency_penalty=0.0 if req.frequency_penalty is None else req.frequency_penalty,
        presence_penalty=0.0 if req.presence_penalty is None else req.presence_penalty,
        max_tokens=max_tokens,
        stop=list(req.stop or []),
        stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=req.ignore_eos,
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens,
        logprobs=logprobs,
    )
    try:
        return p.validate()
    except ValueError as exc:  # "name=value is invalid: ..." -> name the field
        msg = str(exc)
        raise bad_request(msg, msg.split("=", 1)[0] if "=" in msg else None) from None


def check_queue(state: ServerState) -> None:
    """503 + Retry-After when the admission queue is full (``--max-queue``)."""
    queued = state.queued()
    if queued >= state.settings.max_queue:
        raise APIError(
            503,
            f"the server is busy: {queued} requests are waiting (max queue {state.settings.max_queue}); retry later",
            kind="service_unavailable_error",
            code="queue_full",
            headers={"Retry-After": str(state.settings.retry_after_s)},
        )


def fault(state: ServerState, request: Request) -> str | None:
    """Test-only fault injection from the request header; ignored unless switched on."""
    value = request.headers.get(FAULT_HEADER)
    if value is None or not state.settings.enable_fault_injection:
        return None
    if value not in FAULTS:
        raise bad_request(f"{FAULT_HEADER} must be one of {', '.join(FAULTS)}", FAULT_HEADER)
    return value


async def _tokenize(fn: Callable[[], list[list[int]]], param: str) -> list[list[int]]:
    try:
        return await asyncio.to_thread(fn)
    except ValueError as exc:  # RequestError from the chat template, tokenizer errors
        raise bad_request(
            str(exc).splitlines()[0] if str(exc) else "cannot tokenise the input", param
        ) from None


async def _completion_prompts(state: ServerState, req: CompletionRequest) -> list[list[int]]:
    """The request's prompts as token ids (text tokenized, ids checked against the vocabulary)."""
    if req.echo:
        raise bad_request("echo is not supported", "echo", "unsupported_parameter")
    if req.suffix:
        raise bad_request("suffix is not supported", "suffix", "unsupported_parameter")
    if req.best_of is not None and req.best_of != req.n:
        raise bad_request(
            "best_of must equal n (best-of sampling is not supported)",
            "best_of",
            "unsupported_parameter",
        )
    prompts_in: list[Any] = req.prompt
    if isinstance(prompts_in[0], list):
        bad = [t for p in prompts_in for t in p if t >= state.vocab_size]
        if bad:
            raise bad_request(
                f"prompt: token id {bad[0]} is outside the vocabulary [0, {state.vocab_size})",
                "prompt",
            )
        return [list(p) for p in prompts_in]
    return await _tokenize(lambda: [state.tokenizer.encode(p) for p in prompts_in], "prompt")


async def _chat_prompt(state: ServerState, req: ChatCompletionRequest) -> list[list[int]]:
    """The conversation rendered by the chat template and tokenized (one prompt)."""
    messages: list[dict[str, Any]] = []
    for m in req.messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content or ""}
        if m.name is not None:
            d["name"] = m.name
        messages.append(d)
    kwargs = dict(req.chat_template_kwargs or {})
    reserved = sorted({"messages", "add_generation_prompt"} & set(kwargs))
    if reserved:
        raise bad_request(
            f"chat_template_kwargs may not set {', '.join(reserved)}", "chat_template_kwargs"
        )
    prompts = await _tokenize(
        lambda: [
            state.tokenizer.encode_chat(
                messages, add_generation_prompt=req.add_generation_prompt, **kwargs
            )
        ],
        "messages",
    )
    if not prompts[0]:
        raise bad_request("messages render to an empty prompt", "messages")
    return prompts


async def completions(state: ServerState, body: bytes, request: Request) -> Response:
    arrival = time.perf_counter()
    req: CompletionRequest = parse(CompletionRequest, body)
    check_common(state, req)
    prompts = await _completion_prompts(state, req)
    explicit = "max_tokens" in req.model_fields_set
    max_tokens = max_tokens_for(
        state, [len(p) for p in prompts], req.max_tokens, explicit, "prompt", "max_tokens"
    )
    params = sampling_params(req, max_tokens, req.logprobs)
    inject = fault(state, request)
    check_queue(state)
    gen = Generation(state, prompts, params, req.n, arrival, inject)
    await gen.start()
    rid, created, model = (
        f"cmpl-{uuid.uuid4().hex}",
        int(time.time()),
        state.settings.served_model_name,
    )
    offsets = dict.fromkeys(range(len(gen.choices)), 0)

    def logprobs_of(upd: ChoiceUpdate) -> dict[str, Any] | None:
        if req.logprobs is None:
            return None
        lp = completion_logprobs(state, upd, offsets[upd.index])
        offsets[upd.index] += sum(len(t) for t in lp["tokens"])
        return lp

    if not req.stream:
        acc = await collect(gen, request)
        choices = [
            {
                "index": i,
                "text": u.text,
                "logprobs": logprobs_of(u),
                "finish_reason": u.finish_reason,
            }
            for i, u in sorted(acc.items())
        ]
        return JSONResponse(
            {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": choices,
                "usage": gen.usage(),
            }
        )
    with_usage = req.stream_options is not None and req.stream_options.include_usage
    base: dict[str, Any] = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
    }

    def chunk(upd: ChoiceUpdate) -> dict[str, Any] | None:
        if not upd.text and upd.finish_reason is None and not upd.logprobs:
            return None
        choice = {
            "index": upd.index,
            "text": upd.text,
            "logprobs": logprobs_of(upd),
            "finish_reason": upd.finish_reason,
        }
        return {**base, "choices": [choice], **({"usage": None} if with_usage else {})}

    usage_chunk = {**base, "choices": []} if with_usage else None
    return SSEResponse(stream_sse(gen, chunk, [], usage_chunk), gen)


def _role_delta(index: int) -> dict[str, Any]:
    """A streamed chat choice's first chunk: the assistant role, no content yet."""
    return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}


async def chat_completions(state: ServerState, body: bytes, request: Request) -> Response:
    arrival = time.perf_counter()
    req: ChatCompletionRequest = parse(ChatCompletionRequest, body)
    check_common(state, req)
    if req.tools:
        raise bad_request("tools are not supported", "tools", "unsupported_parameter")
    if req.top_logprobs is not None and not req.logprobs:
        raise bad_request("top_logprobs requires logprobs to be true", "top_logprobs")
    prompts = await _chat_prompt(state, req)
    requested = (
        req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    )
    param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    max_tokens = max_tokens_for(state, [len(prompts[0])], requested, True, "messages", param)
    params = sampling_params(req, max_tokens, (req.top_logprobs or 0) if req.logprobs else None)
    inject = fault(state, request)
    check_queue(state)
    gen = Generation(state, prompts, params, req.n, arrival, inject, prompt_param="messages")
    await gen.start()
    rid, created, model = (
        f"chatcmpl-{uuid.uuid4().hex}",
        int(time.time()),
        state.settings.served_model_name,
    )

    if not req.stream:
        acc = await collect(gen, request)
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": u.text},
                "logprobs": chat_logprobs(state, u) if req.logprobs else None,
                "finish_reason": u.finish_reason,
            }
            for i, u in sorted(acc.items())
        ]
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": choices,
                "usage": gen.usage(),
            }
        )
    with_usage = req.stream_options is not None and req.stream_options.include_usage
    base: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
    }
    extra = {"usage": None} if with_usage else {}

    def chunk(upd: ChoiceUpdate) -> dict[str, Any] | None:
        if not upd.text and upd.finish_reason is None and not upd.logprobs:
            return None
        choice = {
            "index": upd.index,
            "delta": {"content": upd.text} if upd.text or upd.logprobs else {},
            "logprobs": chat_logprobs(state, upd) if req.logprobs and upd.logprobs else None,
            "finish_reason": upd.finish_reason,
        }
        return {**base, "choices": [choice], **extra}

    head = [sse({**base, "choices": [_role_delta(c.index)], **extra}) for c in gen.choices]
    usage_chunk = {**base, "choices": []} if with_usage else None
    return SSEResponse(stream_sse(gen, chunk, head, usage_chunk), gen)

"""Bad input: every malformed request is a 400 with an OpenAI-style JSON error naming the field
(never a 422 or a 500), and the server stays healthy afterwards."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from server_kit import MODEL, LiveServer, wait_idle

LONG_PROMPT = "x" * 300  # byte-level tokenizer: 300 tokens > the tiny model's 256-token context
OK_C = {"model": MODEL, "prompt": "hello", "max_tokens": 4}
OK_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
C, CHAT = "/v1/completions", "/v1/chat/completions"


def user(content: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


# (id, path, body (dict, or raw bytes), expected param)
CASES: list[tuple[str, str, Any, str | None]] = [
    ("malformed-json", C, b'{"model": "tiny", "prompt": ', None),
    ("body-not-object", C, b"[1, 2, 3]", None),
    ("empty-body", C, b"", None),
    ("unknown-model", C, {**OK_C, "model": "gpt-17"}, "model"),
    ("model-not-string", C, {**OK_C, "model": 5}, "model"),
    ("missing-prompt", C, {"model": MODEL}, "prompt"),
    ("prompt-wrong-type", C, {**OK_C, "prompt": 123}, "prompt"),
    ("prompt-empty-string", C, {**OK_C, "prompt": ""}, "prompt"),
    ("prompt-empty-list", C, {**OK_C, "prompt": []}, "prompt"),
    ("prompt-mixed-list", C, {**OK_C, "prompt": ["a", 1]}, "prompt"),
    ("prompt-token-out-of-vocab", C, {**OK_C, "prompt": [1, 99999]}, "prompt"),
    ("prompt-longer-than-context", C, {**OK_C, "prompt": LONG_PROMPT}, "prompt"),
    ("max-tokens-beyond-context", C, {**OK_C, "max_tokens": 1000}, "max_tokens"),
    ("max-tokens-string", C, {**OK_C, "max_tokens": "20"}, "max_tokens"),
    ("max-tokens-zero", C, {**OK_C, "max_tokens": 0}, "max_tokens"),
    ("max-tokens-float", C, {**OK_C, "max_tokens": 1.5}, "max_tokens"),
    ("temperature-negative", C, {**OK_C, "temperature": -1}, "temperature"),
    ("temperature-string", C, {**OK_C, "temperature": "hot"}, "temperature"),
    ("temperature-nan", C, b'{"model": "tiny", "prompt": "hi", "temperature": NaN}', "temperature"),
    ("top-p-zero", C, {**OK_C, "top_p": 0}, "top_p"),
    ("top-p-above-one", C, {**OK_C, "top_p": 1.5}, "top_p"),
    ("top-k-below-minus-one", C, {**OK_C, "top_k": -2}, "top_k"),
    ("min-p-above-one", C, {**OK_C, "min_p": 2}, "min_p"),
    ("n-zero", C, {**OK_C, "n": 0}, "n"),
    ("n-too-large", C, {**OK_C, "n": 1000}, "n"),
    ("seed-negative", C, {**OK_C, "seed": -1}, "seed"),
    ("frequency-penalty-range", C, {**OK_C, "frequency_penalty": 3}, "frequency_penalty"),
    ("presence-penalty-range", C, {**OK_C, "presence_penalty": -3}, "presence_penalty"),
    ("repetition-penalty-zero", C, {**OK_C, "repetition_penalty": 0}, "repetition_penalty"),
    ("logprobs-too-many", C, {**OK_C, "logprobs": 21}, "logprobs"),
    ("logprobs-bool", C, {**OK_C, "logprobs": True}, "logprobs"),
    ("stop-wrong-type", C, {**OK_C, "stop": 5}, "stop"),
    ("stop-empty-string", C, {**OK_C, "stop": [""]}, "stop"),
    ("stop-token-ids-negative", C, {**OK_C, "stop_token_ids": [-1]}, "stop_token_ids"),
    ("stream-not-bool", C, {**OK_C, "stream": "yes"}, "stream"),
    (
        "stream-options-without-stream",
        C,
        {**OK_C, "stream_options": {"include_usage": True}},
        "stream_options",
    ),
    (
        "stream-options-wrong-type",
        C,
        {**OK_C, "stream": True, "stream_options": {"include_usage": "y"}},
        "stream_options.include_usage",
    ),
    ("echo-unsupported", C, {**OK_C, "echo": True}, "echo"),
    ("logit-bias-unsupported", C, {**OK_C, "logit_bias": {"1": 5}}, "logit_bias"),
    ("best-of-unsupported", C, {**OK_C, "best_of": 3}, "best_of"),
    ("chat-missing-messages", CHAT, {"model": MODEL}, "messages"),
    ("chat-empty-messages", CHAT, {**OK_CHAT, "messages": []}, "messages"),
    ("chat-messages-not-list", CHAT, {**OK_CHAT, "messages": "hi"}, "messages"),
    (
        "chat-bad-role",
        CHAT,
        {**OK_CHAT, "messages": [{"role": "wizard", "content": "hi"}]},
        "messages[0].role",
    ),
    ("chat-missing-role", CHAT, {**OK_CHAT, "messages": [{"content": "hi"}]}, "messages[0].role"),
    ("chat-content-int", CHAT, {**OK_CHAT, "messages": user(42)}, "messages[0].content"),
    (
        "chat-content-image",
        CHAT,
        {**OK_CHAT, "messages": user([{"type": "image_url", "image_url": {"url": "x"}}])},
        "messages[0].content",
    ),
    (
        "chat-second-message-bad",
        CHAT,
        {**OK_CHAT, "messages": [*user("a"), {"role": "user", "content": None, "x": 1}, 7]},
        "messages[2]",
    ),
    ("chat-too-long", CHAT, {**OK_CHAT, "messages": user(LONG_PROMPT)}, "messages"),
    ("chat-max-tokens-beyond-context", CHAT, {**OK_CHAT, "max_tokens": 1000}, "max_tokens"),
    (
        "chat-max-completion-tokens-beyond-context",
        CHAT,
        {**OK_CHAT, "max_completion_tokens": 1000},
        "max_completion_tokens",
    ),
    ("chat-logprobs-not-bool", CHAT, {**OK_CHAT, "logprobs": "yes"}, "logprobs"),
    ("chat-top-logprobs-without-logprobs", CHAT, {**OK_CHAT, "top_logprobs": 2}, "top_logprobs"),
    (
        "chat-top-logprobs-too-many",
        CHAT,
        {**OK_CHAT, "logprobs": True, "top_logprobs": 30},
        "top_logprobs",
    ),
    (
        "chat-tools-unsupported",
        CHAT,
        {**OK_CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]},
        "tools",
    ),
    (
        "chat-response-format",
        CHAT,
        {**OK_CHAT, "response_format": {"type": "json_object"}},
        "response_format.type",
    ),
    ("chat-unknown-model", CHAT, {**OK_CHAT, "model": "nope"}, "model"),
    (
        "chat-template-kwargs-reserved",
        CHAT,
        {**OK_CHAT, "chat_template_kwargs": {"add_generation_prompt": False}},
        "chat_template_kwargs",
    ),
    ("chat-n-wrong-type", CHAT, {**OK_CHAT, "n": "2"}, "n"),
]


@pytest.fixture(scope="module")
def client(live: LiveServer) -> httpx.Client:
    with httpx.Client(base_url=live.url, timeout=30) as c:
        yield c


@pytest.mark.parametrize(
    ("path", "body", "param"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_request_is_400_naming_the_field(
    client: httpx.Client, path: str, body: Any, param: str | None
) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["message"] and "\n" not in err["message"]
    if param is None:
        assert err["param"] is None and "JSON" in err["message"]
    else:
        assert err["param"] == param
        assert param.split(".")[0].split("[")[0] in err["message"]


def test_routing_errors_have_the_openai_shape(client: httpx.Client) -> None:
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "404"
    r = client.get("/v1/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_server_healthy_after_bad_input(live: LiveServer, client: httpx.Client) -> None:
    assert len(CASES) >= 25
    assert client.get("/health").status_code == 200
    r = client.post("/v1/completions", json=OK_C)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    r = client.post("/v1/chat/completions", json=OK_CHAT)
    assert r.status_code == 200
    wait_idle(live.url)
    assert live.engine.allocator.used_tokens == 0

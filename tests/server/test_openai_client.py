"""The official ``openai`` client against the server (tiny model): completions, chat, streaming,
n > 1, stop strings, logprobs; greedy text equals the offline API's text for the same prompt."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from server_kit import MODEL, LiveServer, metric, offline, wait_idle

from updraft.sampling_params import SamplingParams

PROMPTS = ["The quick brown fox", "Once upon a time, in a land", "def fibonacci(n):"]
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is a KV cache?"},
]
GREEDY = SamplingParams(temperature=0, max_tokens=24)


@pytest.fixture(scope="module")
def client(live: LiveServer) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    yield c
    c.close()


@pytest.fixture(scope="module")
def ref(tiny_folder: Path) -> list:
    return offline(tiny_folder, PROMPTS, GREEDY)


def test_models_and_health(live: LiveServer, client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(live.url + "/health").json() == {"status": "ok"}


def test_completion_equals_offline(client: openai.OpenAI, ref: list) -> None:
    for prompt, want in zip(PROMPTS, ref):
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
        assert r.object == "text_completion"
        assert r.choices[0].text == want.outputs[0].text
        assert r.choices[0].finish_reason == want.outputs[0].finish_reason
        assert r.usage.prompt_tokens == len(want.prompt_token_ids)
        assert r.usage.completion_tokens == len(want.outputs[0].token_ids)
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_batched_prompts_and_token_ids(client: openai.OpenAI, ref: list) -> None:
    r = client.completions.create(model=MODEL, prompt=PROMPTS, max_tokens=24, temperature=0)
    assert [c.text for c in sorted(r.choices, key=lambda c: c.index)] == [
        o.outputs[0].text for o in ref
    ]
    ids = ref[0].prompt_token_ids
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=24, temperature=0)
    assert r.choices[0].text == ref[0].outputs[0].text


def test_streaming_completion_equals_offline(client: openai.OpenAI, ref: list) -> None:
    stream = client.completions.create(
        model=MODEL,
        prompt=PROMPTS[1],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        text += chunk.choices[0].text
        finish = chunk.choices[0].finish_reason or finish
    assert text == ref[1].outputs[0].text
    assert finish == ref[1].outputs[0].finish_reason
    assert usage is not None and usage.completion_tokens == len(ref[1].outputs[0].token_ids)


def test_chat_and_streaming_chat_equal_offline(client: openai.OpenAI, tiny_folder: Path) -> None:
    want = offline(tiny_folder, [CHAT], GREEDY, chat=True)[0].outputs[0]
    r = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=24, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == want.text
    assert r.choices[0].finish_reason == want.finish_reason
    stream = client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=24, temperature=0, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want.text
    assert chunks[-1].choices[0].finish_reason == want.finish_reason


def test_n_choices(client: openai.OpenAI, ref: list) -> None:
    # greedy: every choice is the offline text; sampled with a seed: reproducible
    r = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=24, temperature=0, n=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert {c.text for c in r.choices} == {ref[0].outputs[0].text}
    assert r.usage.prompt_tokens == len(ref[0].prompt_token_ids)
    assert r.usage.completion_tokens == 3 * len(ref[0].outputs[0].token_ids)
    kw = dict(model=MODEL, messages=CHAT, max_tokens=16, temperature=1.0, n=4, seed=7)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len({c.message.content for c in a.choices}) > 1  # seeds differ per choice
    stream = client.chat.completions.create(**kw, stream=True)
    texts = ["", "", "", ""]
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts == [c.message.content for c in a.choices]


def test_stop_strings_match_offline(client: openai.OpenAI, tiny_folder: Path, ref: list) -> None:
    # A stop string taken from the middle of the greedy text: output is cut before it.
    full = ref[2].outputs[0].text
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    want = offline(
        tiny_folder, [PROMPTS[2]], SamplingParams(temperature=0, max_tokens=24, stop=[stop])
    )[0].outputs[0]
    assert want.finish_reason == "stop" and len(want.text) < len(full)
    r = client.completions.create(
        model=MODEL, prompt=PROMPTS[2], max_tokens=24, temperature=0, stop=[stop]
    )
    assert (r.choices[0].text, r.choices[0].finish_reason) == (want.text, "stop")
    assert r.usage.completion_tokens == len(want.token_ids)
    stream = client.completions.create(
        model=MODEL, prompt=PROMPTS[2], max_tokens=24, temperature=0, stop=stop, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == want.text
    assert chunks[-1].choices[0].finish_reason == "stop"
    # include_stop_str_in_output (vLLM extension) keeps the stop string
    r = client.completions.create(
        model=MODEL,
        prompt=PROMPTS[2],
        max_tokens=24,
        temperature=0,
        stop=[stop],
        extra_body={"include_stop_str_in_output": True},
    )
    assert r.choices[0].text == want.text + stop


def test_completion_logprobs(client: openai.OpenAI, tiny_folder: Path) -> None:
    want = offline(
        tiny_folder, [PROMPTS[0]], SamplingParams(temperature=0, max_tokens=8, logprobs=3)
    )[0].outputs[0]
    r = client.completions.create(
        model=MODEL, prompt=PROMPTS[0], max_tokens=8, temperature=0, logprobs=3
    )
    lp = r.choices[0].logprobs
    assert (
        len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(want.token_ids) == 8
    )
    for got, ref_entry, top in zip(lp.token_logprobs, want.logprobs, lp.top_logprobs):
        assert math.isclose(got, ref_entry["logprob"], rel_tol=1e-5, abs_tol=1e-5)
        assert 1 <= len(top) <= 3
        assert max(top.values()) >= got - 1e-6  # greedy: the sampled token is the most likely
    assert lp.text_offset[0] == 0


def test_chat_logprobs_streaming_and_not(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert entry.bytes == list(entry.token.encode())
    stream = client.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        stream=True,
    )
    streamed = [
        e
        for c in stream
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [e.token for e in streamed] == [e.token for e in content]


def test_metrics_after_requests(live: LiveServer, client: openai.OpenAI) -> None:
    client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=4, temperature=0)
    wait_idle(live.url)
    assert metric(live.url, "request_success_total", finished_reason="length") >= 1
    assert metric(live.url, "time_to_first_token_seconds_count") >= 1
    assert metric(live.url, "e2e_request_latency_seconds_count") >= 1
    assert metric(live.url, "generation_tokens_total") > 0
    assert metric(live.url, "kv_cache_usage_perc") == 0

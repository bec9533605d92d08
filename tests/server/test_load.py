"""Load: 32 concurrent streaming clients x 4 requests each against a server with n-gram
speculation. Zero errors, every stream complete, every greedy output equal to the offline
(non-speculative) output for the same prompt, KV usage back to zero at the end."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_kit import MODEL, LiveServer, make_engine, metric, wait_idle

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

CLIENTS, PER_CLIENT = 32, 4
WORDS = (
    "the a cache token draft model verify accept speculative decode batch page kernel graph".split()
)


def make_requests() -> list[dict[str, Any]]:
    rng = random.Random(0)
    out = []
    for i in range(CLIENTS * PER_CLIENT):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 24)))
        out.append({"chat": i % 2 == 1, "text": text, "max_tokens": rng.randrange(8, 48)})
    return out


@pytest.fixture(params=[None, 600], ids=["kv-ample", "kv-600-tokens"])
def spec_server(request: pytest.FixtureRequest, tiny_folder: Path) -> Iterator[LiveServer]:
    """n-gram speculation; with a 600-token KV pool requests also wait for KV and get preempted."""
    engine = make_engine(
        tiny_folder,
        max_total_tokens=request.param,
        # S pinned: the counters below must see drafting, whatever adaptive S would pick on a busy CPU
        speculative_config={"method": "ngram", "num_speculative_tokens": 3, "adaptive": False},
    )
    server = LiveServer(engine)
    yield server
    server.close()


async def stream_one(client: httpx.AsyncClient, req: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": req["max_tokens"],
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if req["chat"]:
        body["messages"] = [{"role": "user", "content": req["text"]}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = req["text"]
        path = "/v1/completions"
    text, finish, usage, done = "", None, None, False
    async with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            event = json.loads(data)
            assert "error" not in event, event
            if event.get("usage"):
                usage = event["usage"]
            for c in event["choices"]:
                text += (c["delta"].get("content") or "") if req["chat"] else c["text"]
                finish = c["finish_reason"] or finish
    return {"text": text, "finish": finish, "usage": usage, "done": done}


async def run_load(url: str, reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any] | None] = [None] * len(reqs)
    limits = httpx.Limits(max_connections=CLIENTS + 4, max_keepalive_connections=CLIENTS + 4)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def worker(k: int) -> None:
            for j in range(PER_CLIENT):
                i = k * PER_CLIENT + j
                results[i] = await stream_one(client, reqs[i])

        await asyncio.wait_for(asyncio.gather(*(worker(k) for k in range(CLIENTS))), timeout=150)
    return results  # type: ignore[return-value]


def test_32_streaming_clients_with_ngram(spec_server: LiveServer, tiny_folder: Path) -> None:
    reqs = make_requests()
    llm = LLM(engine=make_engine(tiny_folder))
    ids = [
        llm.render_chat([{"role": "user", "content": r["text"]}]) if r["chat"] else r["text"]
        for r in reqs
    ]
    ref = llm.generate(
        ids, [SamplingParams(temperature=0, max_tokens=r["max_tokens"]) for r in reqs]
    )

    waiting: list[float] = []
    stop = threading.Event()

    def sample_waiting() -> None:
        while not stop.wait(0.05):
            waiting.append(metric(spec_server.url, "num_requests_waiting"))

    sampler = threading.Thread(target=sample_waiting)
    sampler.start()
    try:
        results = asyncio.run(run_load(spec_server.url, reqs))
    finally:
        stop.set()
        sampler.join()
    max_waiting = max(waiting, default=0)

    for i, (got, want) in enumerate(zip(results, ref)):
        assert got["done"], f"request {i}: stream did not end with [DONE]"
        assert got["text"] == want.outputs[0].text, f"request {i}"
        assert got["finish"] == want.outputs[0].finish_reason, f"request {i}"
        assert got["usage"]["completion_tokens"] == len(want.outputs[0].token_ids), f"request {i}"
    m = wait_idle(spec_server.url)
    assert m["updraft:kv_cache_usage_perc"] == 0
    assert max_waiting > 0  # /metrics saw the queue during the load
    engine = spec_server.engine
    assert engine.allocator.used_tokens == 0 and not engine.requests
    engine.allocator.check_consistency()
    # speculation ran and the counters are exposed under vLLM's names
    drafts = metric(spec_server.url, "spec_decode_num_drafts_total")
    accepted = metric(spec_server.url, "spec_decode_num_accepted_tokens_total")
    assert 0 < drafts and metric(spec_server.url, "spec_decode_num_draft_tokens_total") == 3 * drafts
    assert metric(spec_server.url, "spec_decode_num_accepted_tokens_per_pos_total") == accepted
    assert any(r["usage"].get("acceptance_length", 0) > 1 for r in results)
    assert metric(spec_server.url, "request_success_total", finished_reason="error") == 0
    assert metric(spec_server.url, "request_success_total") == len(reqs)
    if engine.kv_capacity_tokens < 1000:  # the small pool really was too small for the load
        assert engine.stats.preemptions > 0

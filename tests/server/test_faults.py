"""Faults: clients that disconnect, a request whose forward raises, a full admission queue, a
dead engine thread, and SIGTERM during load. Every test is bounded in requests and time."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_kit import (
    MODEL,
    NGRAM,
    LiveServer,
    ServerProcess,
    make_engine,
    metric,
    offline,
    slowed,
    wait_idle,
)

from updraft.sampling_params import SamplingParams

LONG = {"model": MODEL, "max_tokens": 230, "temperature": 0, "ignore_eos": True}


async def read_then_drop(client: httpx.AsyncClient, prompt: str, chunks: int) -> int:
    """Stream a long completion, read ``chunks`` events, then close the connection."""
    seen = 0
    async with client.stream(
        "POST", "/v1/completions", json={**LONG, "prompt": prompt, "stream": True}
    ) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                seen += 1
                if seen >= chunks:
                    break
    return seen


def test_disconnects_free_kv(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live.engine, "step", slowed(live.engine.step, 0.005))
    aborted = metric(live.url, "request_success_total", finished_reason="abort")

    async def run() -> None:
        async with httpx.AsyncClient(base_url=live.url, timeout=30) as client:
            # 20 streams dropped mid-stream, all at once
            seen = await asyncio.gather(
                *(read_then_drop(client, f"stream {i}", 2 + i % 3) for i in range(20))
            )
            assert all(s >= 2 for s in seen)
            # a non-streaming request (4 choices) whose client gives up
            with pytest.raises(httpx.ReadTimeout):
                await client.post(
                    "/v1/completions", json={**LONG, "prompt": "patience", "n": 4}, timeout=0.3
                )

    asyncio.run(asyncio.wait_for(run(), 60))
    wait_idle(live.url)
    assert metric(live.url, "request_success_total", finished_reason="abort") - aborted == 24
    assert live.engine.allocator.used_tokens == 0 and not live.engine.requests
    live.engine.allocator.check_consistency()


def test_injected_forward_failure_fails_alone(live: LiveServer, tiny_folder: Path) -> None:
    prompts = [f"failure isolation {i}" for i in range(4)]
    want = [
        o.outputs[0].text
        for o in offline(tiny_folder, prompts, SamplingParams(temperature=0, max_tokens=32))
    ]
    body = {"model": MODEL, "max_tokens": 32, "temperature": 0}

    async def stream(client: httpx.AsyncClient, i: int, fault: bool) -> tuple[int, list[Any]]:
        headers = {"x-updraft-fault": "forward"} if fault else {}
        async with client.stream(
            "POST",
            "/v1/completions",
            json={**body, "prompt": prompts[i], "stream": True},
            headers=headers,
        ) as r:
            lines = [line async for line in r.aiter_lines()]
        return r.status_code, [
            json.loads(x[6:]) if x != "data: [DONE]" else "[DONE]"
            for x in lines
            if x.startswith("data: ")
        ]

    async def run() -> None:
        async with httpx.AsyncClient(base_url=live.url, timeout=30) as client:
            results = await asyncio.gather(*(stream(client, i, i == 1) for i in range(4)))
            for i, (status, events) in enumerate(results):
                assert status == 200
                if i == 1:  # the failing one: an error event, then the stream closes
                    assert events[-1]["error"]["type"] == "server_error"
                    assert "injected forward failure" in events[-1]["error"]["message"]
                    assert "[DONE]" not in events
                else:
                    assert events[-1] == "[DONE]"
                    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == want[i]
            # non-streaming: a 500 for the failing request, the others are fine
            rs = await asyncio.gather(
                *(
                    client.post(
                        "/v1/completions",
                        json={**body, "prompt": prompts[i]},
                        headers={"x-updraft-fault": "forward"} if i == 2 else {},
                    )
                    for i in range(4)
                )
            )
            for i, r in enumerate(rs):
                if i == 2:
                    assert r.status_code == 500
                    assert r.json()["error"]["type"] == "server_error"
                else:
                    assert r.status_code == 200 and r.json()["choices"][0]["text"] == want[i]

    asyncio.run(asyncio.wait_for(run(), 60))
    wait_idle(live.url)
    assert live.engine.allocator.used_tokens == 0
    assert httpx.get(live.url + "/health").status_code == 200


def test_slow_client_does_not_stall_the_engine(tiny_folder: Path) -> None:
    """A client that reads nothing: its SSE (16 choices x 230 tokens with logprobs, ~2 MB) is far
    more than the socket buffers (set small on both ends) hold, so its handler waits on the
    socket; yet the engine finishes the request (KV freed) and serves others, and the output is
    all there, in order, once the client reads."""
    server = LiveServer(make_engine(tiny_folder), sndbuf=8192)
    engine = server.engine
    transport = httpx.AsyncHTTPTransport(
        socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)]
    )

    async def run() -> None:
        async with httpx.AsyncClient(
            base_url=server.url, timeout=30, transport=transport
        ) as client:
            body = {**LONG, "prompt": "slow reader", "n": 16, "stream": True, "logprobs": 20}
            async with client.stream("POST", "/v1/completions", json=body) as slow:
                assert slow.status_code == 200 and engine.requests  # admitted
                deadline = time.monotonic() + 20
                while engine.requests and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert not engine.requests and engine.allocator.used_tokens == 0
                r = await client.post(
                    "/v1/completions", json={"model": MODEL, "prompt": "meanwhile", "max_tokens": 8}
                )
                assert r.status_code == 200
                lines = [line async for line in slow.aiter_lines() if line.startswith("data: ")]
            assert sum(len(x) for x in lines) > 1_000_000
            assert lines[-1] == "data: [DONE]"
            tokens = [0] * 16
            for line in lines[:-1]:
                c = json.loads(line[6:])["choices"][0]
                tokens[c["index"]] += len(c["logprobs"]["tokens"])
            assert tokens == [230] * 16

    try:
        asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        server.close()


@pytest.fixture()
def one_slot(tiny_folder: Path) -> Iterator[LiveServer]:
    """One running request at a time, one waiting; fault injection left off (the default)."""
    engine = make_engine(tiny_folder, max_running_requests=1)
    engine.step = slowed(engine.step, 0.01)  # type: ignore[method-assign]  # A runs >= 2 s
    server = LiveServer(engine, max_queue=1, enable_fault_injection=False)
    yield server
    server.close()


def test_full_queue_is_503_with_retry_after(one_slot: LiveServer) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(base_url=one_slot.url, timeout=30) as client:
            async with client.stream(
                "POST", "/v1/completions", json={**LONG, "prompt": "runs", "stream": True}
            ) as a:
                # A is running once it has streamed a token. Keep the line iterator referenced:
                # a dropped one is closed by the GC, and that closes A's connection.
                lines = a.aiter_lines()
                while not (await lines.__anext__()).startswith("data: "):
                    pass
                async with client.stream(
                    "POST", "/v1/completions", json={**LONG, "prompt": "waits", "stream": True}
                ) as b:
                    assert b.status_code == 200  # B is admitted and waits for A's slot
                    r = await client.post("/v1/completions", json={**LONG, "prompt": "refused"})
                    assert r.status_code == 503
                    assert r.headers["retry-after"] == "1"
                    assert r.json()["error"]["code"] == "queue_full"
            # A and B dropped: the queue drains, and a new request gets in. The fault header
            # is ignored: fault injection is off unless switched on.
            deadline = time.monotonic() + 20
            while one_slot.state.queued() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            r = await client.post(
                "/v1/completions",
                json={"model": MODEL, "prompt": "later", "max_tokens": 4},
                headers={"x-updraft-fault": "forward"},
            )
            assert r.status_code == 200, r.text

    asyncio.run(asyncio.wait_for(run(), 60))
    wait_idle(one_slot.url)


def test_dead_engine_thread_gives_503_not_a_hang(tiny_folder: Path) -> None:
    engine = make_engine(tiny_folder)
    engine.step = slowed(engine.step, 0.01)  # type: ignore[method-assign]  # the stream lasts >= 2 s
    server = LiveServer(engine, enable_fault_injection=True)
    try:
        with httpx.Client(base_url=server.url, timeout=20) as client:
            stream_events: list[str] = []

            def long_stream() -> None:
                with client.stream(
                    "POST", "/v1/completions", json={**LONG, "prompt": "in flight", "stream": True}
                ) as r:
                    stream_events.extend(
                        line for line in r.iter_lines() if line.startswith("data: ")
                    )

            t = threading.Thread(target=long_stream)
            t.start()
            time.sleep(0.2)
            r = client.post(
                "/v1/completions",
                json={**LONG, "prompt": "crash"},
                headers={"x-updraft-fault": "engine_crash"},
            )
            assert r.status_code == 503
            t.join(20)
            assert not t.is_alive()
            assert "error" in json.loads(
                stream_events[-1][6:]
            )  # the in-flight stream got an error event
            h = client.get("/health")
            assert h.status_code == 503 and "injected engine crash" in h.json()["error"]["message"]
            for path, body in (
                ("/v1/completions", {"prompt": "x"}),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
            ):
                r = client.post(path, json={"model": MODEL, **body})
                assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
    finally:
        server.close()


def test_sigterm_during_load_exits_within_grace(tiny_folder: Path) -> None:
    grace = 2.0
    proc = ServerProcess(
        [
            "--model",
            str(tiny_folder),
            "--device",
            "cpu",
            "--served-model-name",
            MODEL,
            "--no-progress",
            "--speculative-config",
            NGRAM,
            "--shutdown-grace",
            str(grace),
            "--log-interval",
            "0.5",
        ]
    )
    try:
        outcomes: list[str] = []

        async def client_loop(client: httpx.AsyncClient, k: int) -> None:
            for j in range(50):  # bounded: stops at the first refused connection
                try:
                    async with client.stream(
                        "POST",
                        "/v1/completions",
                        json={**LONG, "prompt": f"load {k} {j}", "stream": True},
                    ) as r:
                        lines = [
                            line async for line in r.aiter_lines() if line.startswith("data: ")
                        ]
                    outcomes.append("done" if lines and lines[-1] == "data: [DONE]" else "cut")
                except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                    outcomes.append("refused")
                    return

        async def run() -> float:
            async with httpx.AsyncClient(base_url=proc.url, timeout=30) as client:
                tasks = [asyncio.create_task(client_loop(client, k)) for k in range(8)]
                # under load before the signal: requests running (a busy machine admits them later)
                deadline = time.monotonic() + 30
                while metric(proc.url, "num_requests_running") == 0 and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                assert metric(proc.url, "num_requests_running") > 0
                t0 = time.monotonic()
                proc.terminate()
                await asyncio.gather(*tasks)
                return t0

        t0 = asyncio.run(asyncio.wait_for(run(), 60))
        proc.proc.wait(timeout=grace + 15)
        elapsed = time.monotonic() - t0
        assert elapsed < grace + 5, f"took {elapsed:.1f}s to exit"
        assert proc.proc.returncode in (0, -15), proc.proc.returncode
        assert "refused" in outcomes  # stopped accepting
        log = "".join(proc.lines)
        assert "Traceback" not in log, log[-3000:]
        assert "#running-req:" in log and "accept len:" in log  # the periodic stats line
        assert "KV cache:" in log and "speculative decoding: method=ngram" in log  # startup lines
    finally:
        proc.kill()


def test_shutdown_cancels_requests_that_outlast_the_grace(tiny_folder: Path) -> None:
    """What SIGTERM triggers in uvicorn (``should_exit``), in-process, with requests that need
    ~2.3 s against a 0.5 s grace: streams are cut, their requests aborted, the server stops."""
    engine = make_engine(tiny_folder)
    engine.step = slowed(engine.step, 0.01)  # type: ignore[method-assign]
    server = LiveServer(engine, grace=0.5)
    try:
        ended: list[str] = []

        async def stream(client: httpx.AsyncClient, i: int) -> None:
            try:
                async with client.stream(
                    "POST", "/v1/completions", json={**LONG, "prompt": f"slow {i}", "stream": True}
                ) as r:
                    lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
                ended.append("done" if lines[-1] == "data: [DONE]" else "cut")
            except (httpx.RemoteProtocolError, httpx.ReadError):
                ended.append("cut")

        async def run() -> float:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                tasks = [asyncio.create_task(stream(client, i)) for i in range(4)]
                while engine.stats.generated_tokens < 8:
                    await asyncio.sleep(0.01)
                t0 = time.monotonic()
                server.server.should_exit = True
                await asyncio.gather(*tasks)
                return t0

        t0 = asyncio.run(asyncio.wait_for(run(), 30))
        server.thread.join(10)
        assert not server.thread.is_alive()
        assert time.monotonic() - t0 < 0.5 + 3
        assert ended == ["cut"] * 4
        assert (
            server.state.engine_thread.stopping and server.state.engine_thread.dead_reason is None
        )
        assert engine.allocator.used_tokens == 0 and not engine.requests
    finally:
        server.close()

"""Helpers of the HTTP tests: servers in-process (uvicorn on a background thread) or as a
subprocess (``updraft serve``), always on 127.0.0.1 and a free port; metrics and SSE parsing;
reference outputs from the offline API."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from updraft.config import EngineConfig
from updraft.engine.engine import Engine
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.server.settings import ServerSettings

HOST = "127.0.0.1"
MODEL = "tiny"
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'


def make_engine(folder: Path | str, **kw: Any) -> Engine:
    kw.setdefault("device", "cpu")
    kw.setdefault("progress", False)
    return Engine(EngineConfig.from_kwargs(model=str(folder), **kw))


class LiveServer:
    """``build_app(engine, settings)`` served by uvicorn on a daemon thread."""

    def __init__(
        self, engine: Engine, grace: float = 3.0, sndbuf: int | None = None, **settings: Any
    ) -> None:
        import uvicorn

        from updraft.server.app import build_app

        settings.setdefault("served_model_name", MODEL)
        settings.setdefault("log_interval_s", 0)
        self.engine = engine
        self.app = build_app(engine, ServerSettings(**settings))
        sock = socket.create_server((HOST, 0))
        if sndbuf is not None:  # inherited by accepted connections (and fixes their send buffer)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", timeout_graceful_shutdown=grace, lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def state(self) -> Any:
        return self.app.state.server

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)
        assert not self.thread.is_alive(), "the test server did not stop"


class ServerProcess:
    """``updraft serve`` in a subprocess; the port comes from its startup log line."""

    def __init__(
        self, args: list[str], env: dict[str, str] | None = None, timeout: float = 90.0
    ) -> None:
        cmd = [sys.executable, "-m", "updraft.cli", "serve", "--host", HOST, "--port", "0", *args]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self.port: int | None = None
        started = threading.Event()

        def pump() -> None:  # read stderr continuously so the child never blocks on a full pipe
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                if "Application startup complete" in line:
                    started.set()
            started.set()

        threading.Thread(target=pump, daemon=True).start()
        if not started.wait(timeout) or self.port is None or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("server subprocess did not start:\n" + "".join(self.lines[-30:]))

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def slowed(step: Callable[[], Any], delay: float) -> Callable[[], Any]:
    """``engine.step`` made slower, so that the tiny model's requests last long enough to be
    caught mid-flight deterministically (tests only; patch it onto an in-process engine)."""

    def slow_step() -> Any:
        time.sleep(delay)
        return step()

    return slow_step


def metrics(url: str) -> dict[str, float]:
    """Prometheus samples as {"name{labels}": value} (labels as exposed)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def metric(url: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``updraft:<name>`` whose labels include ``labels``."""
    total = 0.0
    for key, value in metrics(url).items():
        base, _, rest = key.partition("{")
        if base != "updraft:" + name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


def wait_idle(url: str, timeout: float = 20.0) -> dict[str, float]:
    """Poll /metrics until nothing runs or waits and the KV cache is empty."""
    deadline = time.monotonic() + timeout
    while True:
        m = {k.partition("{")[0]: v for k, v in metrics(url).items()}
        idle = m["updraft:num_requests_running"] == 0 and m["updraft:num_requests_waiting"] == 0
        if idle and m["updraft:kv_cache_used_tokens"] == 0:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"server not idle after {timeout}s: {m}")
        time.sleep(0.05)


def sse_events(lines: list[str]) -> list[Any]:
    """Parse SSE ``data:`` lines: JSON objects, and the string "[DONE]"."""
    out: list[Any] = []
    for line in lines:
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def offline(
    folder: Path | str,
    prompts: list[Any],
    params: SamplingParams | list[SamplingParams],
    chat: bool = False,
) -> list[Any]:
    """Reference outputs from the offline API on the same model."""
    llm = LLM(engine=make_engine(folder))
    if chat:
        assert isinstance(params, SamplingParams)
        return [llm.chat(p, params)[0] for p in prompts]
    return llm.generate(prompts, params)

"""Prometheus metrics of one server instance (its own ``CollectorRegistry``).

Names follow vLLM's with an ``updraft:`` prefix. Request-level series (finish reasons, TTFT,
TPOT, end-to-end latency) are observed on the HTTP side when a request finishes; engine-level
series (running / waiting requests, KV usage, token and speculative counters) are read from the
engine thread's latest :class:`~updraft.server.engine_thread.EngineSnapshot` at scrape time, so
scraping never touches the engine. Counters are exposed with prometheus' ``_total`` suffix, e.g.
``updraft:spec_decode_num_drafts_total`` (as vLLM's ``vllm:spec_decode_num_drafts_total``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from updraft.server.engine_thread import EngineSnapshot

PREFIX = "updraft:"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
TPOT_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
)


class _EngineCollector(Collector):
    """Engine gauges and counters from the latest snapshot."""

    def __init__(
        self, snapshot: Callable[[], EngineSnapshot], model: str, queued: Callable[[], int]
    ) -> None:
        self._snapshot = snapshot
        self._model = model
        self._queued = queued

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        labels = ["model_name"]
        values = [self._model]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(PREFIX + name, doc, labels=labels)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(PREFIX + name, doc, labels=labels)
            c.add_metric(values, value)
            return c

        yield gauge("num_requests_running", "Requests in the running batch.", s.num_running)
        yield gauge("num_requests_waiting", "Requests waiting for a running slot.", self._queued())
        yield gauge(
            "kv_cache_usage_perc", "Fraction of KV cache token slots in use (0..1).", s.kv_usage
        )
        yield gauge("kv_cache_used_tokens", "KV cache token slots in use.", s.kv_used_tokens)
        yield gauge("kv_cache_capacity_tokens", "KV cache size in tokens.", s.kv_capacity_tokens)
        yield counter(
            "prompt_tokens",
            "Prefilled tokens (recomputed ones after preemption included).",
            s.prompt_tokens,
        )
        yield counter("generation_tokens", "Generated tokens.", s.generation_tokens)
        yield counter("spec_decode_num_drafts", "Speculative verify steps.", s.num_drafts)
        yield counter("spec_decode_num_draft_tokens", "Draft tokens proposed.", s.num_draft_tokens)
        yield counter(
            "spec_decode_num_accepted_tokens",
            "Draft tokens accepted (bonus not counted).",
            s.num_accepted_tokens,
        )
        per_pos = CounterMetricFamily(
            PREFIX + "spec_decode_num_accepted_tokens_per_pos",
            "Verify steps whose draft at this position was accepted.",
            labels=[*labels, "position"],
        )
        for pos, count in enumerate(s.accepted_per_pos):
            per_pos.add_metric([*values, str(pos)], count)
        yield per_pos
        chosen = CounterMetricFamily(
            PREFIX + "spec_decode_chosen_steps",
            "Fused speculative iterations by the number of drafts adaptive speculation chose (0 = plain step).",
            labels=[*labels, "num_steps"],
        )
        for steps, count in s.chosen_steps:
            chosen.add_metric([*values, str(steps)], count)
        yield chosen


class ServerMetrics:
    """The registry of one server plus the request-level instruments."""

    def __init__(
        self, snapshot: Callable[[], EngineSnapshot], model: str, queued: Callable[[], int]
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.model = model
        self.request_success = Counter(
            PREFIX + "request_success",
            "Finished requests by finish reason.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            PREFIX + "time_to_first_token_seconds",
            "Time to first token (arrival at the server to first token).",
            ["model_name"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.tpot = Histogram(
            PREFIX + "time_per_output_token_seconds",
            "Mean time per output token after the first, per request.",
            ["model_name"],
            buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.e2e = Histogram(
            PREFIX + "e2e_request_latency_seconds",
            "End-to-end request latency.",
            ["model_name"],
            buckets=E2E_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_EngineCollector(snapshot, model, queued))
        for reason in ("stop", "length", "abort", "error"):  # expose zeros from the start
            self.request_success.labels(model, reason)

    def observe_finish(
        self, reason: str, ttft: float | None, tpot: float | None, e2e: float
    ) -> None:
        """Record one finished engine request (one choice of an HTTP request)."""
        self.request_success.labels(self.model, reason).inc()
        if ttft is not None:
            self.ttft.labels(self.model).observe(ttft)
        if tpot is not None:
            self.tpot.labels(self.model).observe(tpot)
        self.e2e.labels(self.model).observe(e2e)

    def render(self) -> bytes:
        return generate_latest(self.registry)

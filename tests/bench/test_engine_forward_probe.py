"""``engine_forward_probe.summarize``: the figures it prints, from fake profiler events (the probe itself needs a GPU)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any


def event(name: str, start: float, end: float) -> Any:
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def test_summarize_spans_idle_and_names(load_benchmark: Callable[[str], ModuleType]) -> None:
    probe = load_benchmark("engine_forward_probe")
    # two replays, each: one admit write (left out), then a, b (overlapping a), a gap of 2 us, c
    events = []
    for t0 in (0.0, 100.0):
        events += [event("admit", t0, t0 + 1), event("a", t0 + 10, t0 + 14), event("b", t0 + 13, t0 + 16),
                   event("c", t0 + 18, t0 + 19)]
    out = probe.summarize(list(reversed(events)), [0.5, 0.7], iters=2, skip=1)
    assert out["kernels"] == 3 and out["replay_ms"] == 0.6
    assert out["span_us"] == 9.0  # 10 -> 19
    assert out["busy_us"] == 8.0  # 4 + 3 + 1
    assert out["idle_us"] == 2.0  # 16 -> 18; the overlap of a and b is not idle
    assert out["per_name"] == {"a": [4.0, 1.0], "b": [3.0, 1.0], "c": [1.0, 1.0]}
    assert out["sequence"] == [["a", 0.0, 4.0], ["b", 3.0, 3.0], ["c", 8.0, 1.0]]

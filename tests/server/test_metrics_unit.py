"""The Prometheus exposition of engine snapshots (no server, no engine thread)."""

from __future__ import annotations

from updraft.server.engine_thread import EngineSnapshot
from updraft.server.metrics import ServerMetrics


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_chosen_steps_histogram_is_exposed() -> None:
    snap = EngineSnapshot(num_drafts=14, chosen_steps=((0, 4), (2, 1), (5, 9)))
    m = ServerMetrics(lambda: snap, "tiny", lambda: 0)
    got = samples(m.render().decode())
    name = "updraft:spec_decode_chosen_steps_total"
    assert got[f'{name}{{model_name="tiny",num_steps="0"}}'] == 4
    assert got[f'{name}{{model_name="tiny",num_steps="2"}}'] == 1
    assert got[f'{name}{{model_name="tiny",num_steps="5"}}'] == 9
    assert not any(k.startswith(name) and 'num_steps="1"' in k for k in got)
    empty = samples(ServerMetrics(lambda: EngineSnapshot(), "tiny", lambda: 0).render().decode())
    assert not any(k.startswith(name) for k in empty)

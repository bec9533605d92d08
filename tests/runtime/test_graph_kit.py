"""Graph mode of the kit on CPU (emulated graphs): every graph-capable backend x phase x pad style
x capture bs in {1x, 2x, 4x}: replay == eager on real rows and == the float64 reference, with the
metadata invariants checked after every replay-init."""

from __future__ import annotations

import pytest

from updraft.attention import backend_class
from updraft.batch import ForwardMode
from updraft.kit.cases import AttnCase
from updraft.kit.graph_harness import run_graph

M = ForwardMode


def cases(mode: ForwardMode, dtype: str = "float32") -> list[AttnCase]:
    if mode in (M.DECODE, M.DRAFT_DECODE):
        lens = [((17,), (1,)), ((0, 15, 33), (1, 1, 1))]
    elif mode == M.DRAFT_EXTEND:
        lens = [((16,), (3,)), ((0, 17, 5), (4, 1, 2))]
    else:
        lens = [((15,), (4,)), ((0, 16, 33), (4, 4, 4))]
    out = []
    for i, (pre, ext) in enumerate(lens):
        for layout, page in (("shuffled", 1), ("interleaved", 16)):
            out.append(AttnCase(mode, 8, 2, 16, page, pre, ext, dtype, layout, seed=i))
    return out


def graph_modes(name: str) -> list[ForwardMode]:
    return sorted(backend_class(name).graph_modes)


@pytest.mark.parametrize("backend", ["torch_native", "triton"])
@pytest.mark.parametrize("pad", ["fill", "real"])
@pytest.mark.parametrize("mult", [1, 2, 4])
def test_graph_replay_matches_eager_and_reference(backend: str, pad: str, mult: int) -> None:
    failures, n = [], 0
    for mode in graph_modes(backend):
        for case in cases(mode):
            r = run_graph(backend, case, mult, pad)
            n += 1
            if not r.ok:
                failures.append(r.describe())
    assert n >= 8
    assert not failures, f"{len(failures)}/{n} failed: {failures[:3]}"


def test_bf16_graph_replay() -> None:
    for mode in graph_modes("torch_native"):
        for case in cases(mode, "bfloat16")[:2]:
            r = run_graph("torch_native", case, 2, "fill")
            assert r.ok, r.describe()

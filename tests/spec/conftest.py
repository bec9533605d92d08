"""Random-weight EAGLE / EAGLE-3 heads saved in the published checkpoint key layout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.testing import write_eagle3_head, write_eagle_head

#: What the speculative tests generate, and the plain reference they are compared with.
SPEC_GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Callable[[object, str], list[int]]:
    """``launches(module, name)``: a list that gets one entry each time the Triton kernel
    ``module.name`` is launched (its launcher indexes it with a grid); the kernel still runs. A
    test reads it to know the launcher took the kernel, not the torch path."""

    def watch(module: object, name: str) -> list[int]:
        calls: list[int] = []
        real = getattr(module, name)

        class Spy:
            def __getitem__(self, grid):  # noqa: ANN001, ANN204 - a launch grid, as a kernel takes it
                calls.append(1)
                return real[grid]

        monkeypatch.setattr(module, name, Spy())
        return calls

    return watch


@pytest.fixture(scope="session")
def eagle_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_eagle_head(tmp_path_factory.mktemp("eagle"))


@pytest.fixture(scope="session")
def eagle3_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_eagle3_head(tmp_path_factory.mktemp("eagle3"))


@pytest.fixture(scope="session")
def eagle3_deep_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """EAGLE-3 with two standard layers after its mid layer (``train-draft --head-layers 3``)."""
    return write_eagle3_head(tmp_path_factory.mktemp("eagle3_deep"), seed=3, extra_layers=2)


@pytest.fixture(scope="session")
def target(tiny_checkpoint):  # noqa: ANN001, ANN201
    """The tiny Llama target every speculative test drafts for."""
    return tiny_checkpoint("llama")


@pytest.fixture(scope="session")
def reference(target):  # noqa: ANN001, ANN201
    """``reference(prompts)``: plain greedy outputs (SPEC_GREEDY) of the target, cached."""
    llm = LLM(str(target), device="cpu", progress=False)
    cache: dict[tuple, list[list[int]]] = {}

    def run(ps: list[list[int]]) -> list[list[int]]:
        key = tuple(map(tuple, ps))
        if key not in cache:
            cache[key] = [o.outputs[0].token_ids for o in llm.generate(ps, SPEC_GREEDY)]
        return cache[key]

    return run


@pytest.fixture
def step_ops(monkeypatch: pytest.MonkeyPatch) -> Callable[[object, int], float]:
    """``step_ops(engine, steps)``: host tensor ops per fused launch over ``steps`` calls of
    ``Engine.step()``, counted at the dispatcher. The emulated replay stands in for a CUDA graph
    replay (one call there), so its own ops are not counted."""
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

    from updraft.runtime.graphs.device_graph import EmulatedGraph

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            Count.n += 1
            return func(*args, **(kwargs or {}))

    real_replay = EmulatedGraph.replay

    def replay_uncounted(self: EmulatedGraph) -> None:
        with _disable_current_modes():
            real_replay(self)

    monkeypatch.setattr(EmulatedGraph, "replay", replay_uncounted)

    def measure(eng, steps: int) -> float:  # noqa: ANN001
        launches, Count.n = eng.driver.launches, 0
        with Count():
            for _ in range(steps):
                eng.step()
        n = eng.driver.launches - launches
        assert n == steps, f"{n} fused launches in {steps} steps"
        return Count.n / n

    return measure


@pytest.fixture
def body_kernels(monkeypatch: pytest.MonkeyPatch) -> Callable[[object, int, bool, int], int]:
    """``body_kernels(fused, s, sampled, bs)``: device kernels one captured iteration body
    (``FusedIteration._body``) issues at (S, sampled, bs): aten compute ops plus Triton launches
    (``count_ops``), with the sampled acceptance on its kernels as on a GPU (CPU engine runs keep
    the dense path). Counted on a second run (the first compiles), on padding rows: nothing in a
    body depends on the values."""
    import torch

    from updraft.spec import rejection_kernels
    from updraft.testing import count_ops

    monkeypatch.setattr(rejection_kernels, "INTERPRET", True)

    def count(fused, s: int, sampled: bool, bs: int) -> int:  # noqa: ANN001
        g = fused._build(s, sampled, bs)
        with torch.inference_mode():
            fused._body(g)
            c = count_ops(lambda: fused._body(g))
        return c.compute + c.triton

    return count


def _abort_mid_flight(eng: object, params: SamplingParams) -> list[object]:
    """Three requests on ``eng``; the second is aborted while a fused iteration is in flight
    (its KV must survive until that iteration is done), then everything runs to the end."""
    from updraft.testing import repeating_prompts

    reqs = [eng.add_request(p, params) for p in repeating_prompts(3, seed=2)]  # type: ignore[attr-defined]
    for _ in range(6):
        eng.step()  # type: ignore[attr-defined]
    assert eng.driver.inflight is not None, "expected an iteration in flight"  # type: ignore[attr-defined]
    assert eng.abort(reqs[1].request_id)  # type: ignore[attr-defined]
    assert reqs[1].row is not None, "KV must survive until the iteration in flight is done"
    while eng.has_unfinished():  # type: ignore[attr-defined]
        eng.step()  # type: ignore[attr-defined]
    return reqs


@pytest.fixture
def abort_mid_flight() -> Callable[[object, SamplingParams], list[object]]:
    """``abort_mid_flight(engine, params)``: see ``_abort_mid_flight``."""
    return _abort_mid_flight

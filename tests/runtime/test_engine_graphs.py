"""The whole engine with graphs (emulated on CPU) gives the same tokens as without them, for plain
decoding and every proposer x {v1, v2}; the graphs really ran."""

from __future__ import annotations

import itertools
import random

import pytest

from updraft.batch import ForwardMode
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.testing import write_eagle3_head, write_eagle_head

GREEDY = SamplingParams(temperature=0, max_tokens=18, ignore_eos=True)


@pytest.fixture(scope="module")
def heads(tmp_path_factory):  # noqa: ANN001, ANN201
    return {
        "eagle": write_eagle_head(tmp_path_factory.mktemp("e")),
        "eagle3": write_eagle3_head(tmp_path_factory.mktemp("e3")),
    }


@pytest.mark.parametrize(
    "kind,version",
    [("plain", None), ("plain", "per-step"), ("ngram", "v2"), ("eagle", "v2"), ("eagle", "v1"), ("eagle3", "v2"), ("eagle3", "v1"), ("standalone", "v2"), ("standalone", "v1")],
)
def test_graphs_equal_eager(tiny_checkpoint, heads, kind: str, version: str | None) -> None:  # noqa: ANN001
    target = tiny_checkpoint("llama")
    rng = random.Random(4)
    ps = [[rng.randrange(256) for _ in range(rng.randrange(4, 30))] for _ in range(6)]
    cfg = None
    if kind == "ngram":
        cfg = {"method": "ngram", "num_speculative_tokens": 3}
    elif kind in heads:
        cfg = {"method": kind, "model": str(heads[kind]), "num_speculative_tokens": 3, "draft_extend": version}
    elif kind == "standalone":
        cfg = {"method": "standalone", "model": str(tiny_checkpoint("llama", seed=5)), "num_speculative_tokens": 3, "draft_extend": version}
    if cfg is not None and not (kind in heads and version == "v2"):
        cfg["adaptive"] = False  # per-phase: S = 3 every iteration, the width its graphs are captured at
    eager = LLM(str(target), device="cpu", progress=False, speculative_config=cfg)
    # plain decoding overlaps through the fused step by default; "per-step" keeps the DECODE graphs
    graphs = LLM(str(target), device="cpu", progress=False, speculative_config=cfg, graph_emulate=True, cuda_graph_max_bs=8,
                 disable_overlap=version == "per-step")
    ref = [o.outputs[0].token_ids for o in eager.generate(ps, GREEDY)]
    assert [o.outputs[0].token_ids for o in graphs.generate(ps, GREEDY)] == ref
    eng = graphs.engine
    if eng.driver is not None:
        # EAGLE v2, n-gram and plain decoding run the fused iteration (one graph per iteration);
        # nothing fell back to the per-phase runners, whose graphs the kit's production-runner
        # columns cover.
        assert eng.driver.launches > 0 and eng.driver.fused.graphs
        assert not eng.runner.path_counts, eng.runner.path_counts
        if kind == "ngram":
            assert eng.driver.fused.ngram is not None
        else:
            assert eng.spec is None or not eng.spec.proposer.runner.path_counts  # type: ignore[attr-defined]
        return
    assert eng.runner.graph_hit_rate() == 1.0, eng.runner.path_counts
    if eng.spec is not None and hasattr(eng.spec.proposer, "runner"):
        counts = eng.spec.proposer.runner.path_counts
        if version == "v2":
            assert set(counts) == {"DRAFT_EXTEND_V2 graph"}, counts
        if version == "v1":  # torch_native cannot capture the packed v1 extend: eager, with a reason
            assert any("DRAFT_EXTEND eager" in line for line in eng.graph_log)
        # the S-1 draft forwards ran as one chained graph every iteration
        assert set(eng.spec.proposer.chain_counts) == {"chain graph"}, eng.spec.proposer.chain_counts


def test_sampling_drafts_take_the_per_step_path(tiny_checkpoint, heads) -> None:  # noqa: ANN001
    target = tiny_checkpoint("llama")
    cfg = {"method": "eagle", "model": str(heads["eagle"]), "num_speculative_tokens": 3}
    llm = LLM(str(target), device="cpu", progress=False, speculative_config=cfg, graph_emulate=True, cuda_graph_max_bs=8)
    # logprobs keep this batch on the per-phase path (the fused iteration samples with its own
    # counter-based RNG instead of the request's generator: same distribution, other draws).
    p = SamplingParams(temperature=0.7, seed=1, max_tokens=10, ignore_eos=True, logprobs=0)
    eager = LLM(str(target), device="cpu", progress=False, speculative_config=cfg)
    assert llm.generate([[1, 2, 3]], p)[0].outputs[0].token_ids == eager.generate([[1, 2, 3]], p)[0].outputs[0].token_ids
    counts = llm.engine.spec.proposer.chain_counts
    assert counts and all(k.startswith("per step: sampling") for k in counts), counts


@pytest.mark.parametrize("kind", ["plain", "eagle"])
def test_prefill_graphs_equal_eager(tiny_checkpoint, heads, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """Prompts that fit a captured prefill width replay the EXTEND graph of the narrowest one (and
    the EAGLE draft's prefill graph); longer prompts and wider waves run eagerly; the outputs equal
    an engine without graphs (triton backend, interpreted on CPU; widths 16 and 48 to keep the
    interpreter quick, the production widths are 64 and 256)."""
    from updraft.engine import graph_setup as setup

    monkeypatch.setattr(setup, "PREFILL_WIDTHS", (16, 48))
    target = tiny_checkpoint("llama")
    rng = random.Random(7)
    ps = [[rng.randrange(256) for _ in range(n)] for n in (5, 9, 12, 40, 60, 16)]
    cfg = {"method": "eagle", "model": str(heads["eagle"]), "num_speculative_tokens": 2} if kind == "eagle" else None
    common = dict(device="cpu", progress=False, attention_backend="triton", speculative_config=cfg, max_running_requests=2,
                  prefill_graph_tokens=[])
    # different lengths, so that after the first wave requests arrive one at a time
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in (2, 7, 3, 5, 2, 4)]
    eager = LLM(str(target), **common)
    graphs = LLM(str(target), graph_emulate=True, cuda_graph_bs=[1], **common)
    ref = [o.outputs[0].token_ids for o in eager.generate(ps, params)]
    assert [o.outputs[0].token_ids for o in graphs.generate(ps, params)] == ref
    counts = graphs.engine.runner.path_counts
    assert [g.phase.width for g in graphs.engine.runner.prefill_graphs] == [16, 48]
    # a wave of two at the start (batch size 2 > 1 captured: eager), then single arrivals of 12
    # and 40 tokens (graphs, widths 16 and 48), 60 (longer than 48: eager) and 16 tokens
    assert counts["EXTEND graph"] >= 2, counts
    assert counts["EXTEND eager: batch size 2 > largest captured 1"] >= 1, counts
    if kind == "eagle":
        assert graphs.engine.spec.proposer.runner.path_counts["EXTEND graph"] >= 1  # type: ignore[union-attr]


def test_many_request_prefill_graphs_equal_eager(tiny_checkpoint, heads, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """A wave of prompt chunks from several requests replays a token-budget prefill graph (the
    smallest budget its tokens fit, padded requests taking one row each), for the target and
    the EAGLE draft's prefill; a wave over every budget runs eagerly; outputs equal an engine
    without graphs (triton backend, interpreted: a budget of 40 tokens and a per-request width
    of 16 here, to keep the interpreter quick)."""
    from updraft.engine import graph_setup as setup

    monkeypatch.setattr(setup, "PREFILL_WIDTHS", (16,))
    target = tiny_checkpoint("llama")
    rng = random.Random(8)
    ps = [[rng.randrange(256) for _ in range(n)] for n in (5, 9, 12, 30, 25)]
    cfg = {"method": "eagle", "model": str(heads["eagle"]), "num_speculative_tokens": 2}
    common = dict(device="cpu", progress=False, attention_backend="triton", speculative_config=cfg, max_running_requests=3)
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in (2, 2, 2, 3, 2)]
    eager = LLM(str(target), **common)
    graphs = LLM(str(target), graph_emulate=True, cuda_graph_bs=[1, 2, 3], prefill_graph_tokens=[40], **common)
    runner = graphs.engine.runner
    budgets = [(g.phase.width, g.phase.tokens, g.sizes) for g in runner.prefill_graphs if g.phase.tokens]
    assert budgets == [(40, 42, [3, 2, 1])], budgets  # 40 tokens + 2 padded rows; the powers of two and the largest
    ref = [o.outputs[0].token_ids for o in eager.generate(ps, params)]
    assert [o.outputs[0].token_ids for o in graphs.generate(ps, params)] == ref
    counts = runner.path_counts
    # the first wave (5 + 9 + 12 = 26 tokens of 3 requests) fits both the width-16 graph (48 rows
    # at bs 3) and the 40-token budget (42 rows), which has fewer rows and replays; the next wave
    # (30 + 25 = 55 tokens, 30 > 16) fits no graph
    assert counts["EXTEND graph"] >= 1, counts
    assert counts["EXTEND eager: 55 tokens of 2 requests > captured 42 at batch size 2"] == 1, counts
    assert graphs.engine.spec.proposer.runner.path_counts["EXTEND graph"] >= 1  # type: ignore[union-attr]


def test_prefill_budgets() -> None:
    from updraft.engine.graph_setup import prefill_sizes, prefill_token_budgets
    from updraft.runtime.graphs.phase_graph import PhaseSpec

    assert prefill_token_budgets(2048, None, 8192) == [512, 1024, 2048]
    assert prefill_token_budgets(3000, None, 8192) == [512, 1024, 2048, 3000]
    assert prefill_token_budgets(2048, None, 1500) == [512, 1024, 1500]
    assert prefill_token_budgets(2048, [100, 4096], 8192) == [100, 2048]
    assert prefill_token_budgets(2048, [], 8192) == []
    budget = PhaseSpec(ForwardMode.EXTEND, 512, "last", tokens=512)
    assert prefill_sizes(budget, [64, 48, 32, 24, 16, 12, 8, 4, 2, 1]) == [64, 32, 16, 8, 4, 2, 1]
    assert prefill_sizes(PhaseSpec(ForwardMode.EXTEND, 64, "last"), [64, 8, 4, 2, 1]) == [4, 2, 1]
    assert prefill_sizes(PhaseSpec(ForwardMode.EXTEND, 12, "last", tokens=12), [64, 24, 12, 8, 1]) == [12, 8, 1]
    assert budget.capacity(64) == 512 and budget.capacity(1) == 512 and budget.pad_tokens == 1
    narrow = PhaseSpec(ForwardMode.EXTEND, 64, "last")
    assert narrow.capacity(4) == 256 and narrow.pad_tokens == 64


def test_per_phase_adaptive_replays_every_width(tiny_checkpoint) -> None:  # noqa: ANN001
    """Without a fused driver (a standalone draft) adaptive speculation may run S = 0..3: the
    target has a verify graph at every width S + 1 and the decode graph for S = 0, and replays
    them; outputs equal eager greedy. S is cycled through every choice here (the cost model
    alone would settle on one on this CPU)."""
    target = tiny_checkpoint("llama")
    rng = random.Random(6)
    ps = [[rng.randrange(256) for _ in range(rng.randrange(4, 30))] for _ in range(6)]
    cfg = {"method": "standalone", "model": str(tiny_checkpoint("llama", seed=5)), "num_speculative_tokens": 3}
    eager = LLM(str(target), device="cpu", progress=False, speculative_config=cfg)
    graphs = LLM(str(target), device="cpu", progress=False, speculative_config=cfg, graph_emulate=True, cuda_graph_max_bs=8)
    eng = graphs.engine
    assert eng.driver is None and eng.spec is not None
    assert eng.runner.graph_widths(ForwardMode.TARGET_VERIFY) == [2, 3, 4]
    turn = itertools.cycle(eng.spec.adaptive.choices)
    ran: list[int] = []
    eng.spec.adaptive.choose = lambda bs, sampled=False: ran.append(next(turn)) or ran[-1]  # type: ignore[method-assign]
    ref = [o.outputs[0].token_ids for o in eager.generate(ps, GREEDY)]
    assert [o.outputs[0].token_ids for o in graphs.generate(ps, GREEDY)] == ref
    assert set(ran) == {0, 1, 2, 3}
    assert eng.runner.graph_hit_rate() == 1.0, eng.runner.path_counts
    assert {"TARGET_VERIFY graph", "DECODE graph"} <= set(eng.runner.path_counts), eng.runner.path_counts
    draft = eng.spec.proposer.runner  # type: ignore[attr-defined]
    assert draft.graph_widths(ForwardMode.DRAFT_EXTEND_V2) == [2, 3, 4]
    assert draft.graph_hit_rate() == 1.0, draft.path_counts

"""Adaptive S on the per-phase iteration (CPU, no graphs): S = 0 is a plain target step and the
draft falls behind; the first S > 0 iteration after such steps catches the draft up in one
extend. Lossless whatever S runs, and the caught-up draft is the draft a fresh prefill gives."""

from __future__ import annotations

import pytest
import torch

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.spec.proposers import DraftModelProposer
from updraft.testing import repeating_prompts as prompts
from updraft.testing import scripted_steps

GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)  # = conftest.SPEC_GREEDY
SCRIPT = [0, 0, 0, 2, 0, 1, 3, 0, 0, 0, 0, 0, 3, 1, 1, 0, 2]


def make(target, kind: str, paths: dict, **extra) -> LLM:  # noqa: ANN001
    cfg: dict = {"num_steps": 3, **extra}
    if kind == "ngram":
        cfg.update(method="ngram", ngram_min=1, ngram_max=3)
    elif kind == "other":
        cfg.update(method="standalone", draft_model=str(paths["other"]))
    else:
        cfg.update(method=kind, draft_model=str(paths[kind]))
    return LLM(str(target), device="cpu", progress=False, speculative_config=cfg)


@pytest.fixture
def paths(tiny_checkpoint, eagle_head, eagle3_head) -> dict:  # noqa: ANN001
    return {"other": tiny_checkpoint("llama", seed=5), "eagle": eagle_head, "eagle3": eagle3_head}


def draft_state(llm: LLM, row: int) -> tuple[int, torch.Tensor | None]:
    prop = llm.engine.spec.proposer  # type: ignore[union-attr]
    assert isinstance(prop, DraftModelProposer)
    hidden = prop.next_hidden[row].clone() if prop.next_hidden is not None else None
    return int(prop.next_token[row]), hidden


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "other"])
def test_draft_caught_up_after_plain_steps_equals_a_fresh_prefill(target, reference, paths, kind: str) -> None:  # noqa: ANN001
    """After every S > 0 iteration (the first ones after S = 0 steps catch up) the draft's next
    first draft and feature equal those of a draft that prefilled the same committed tokens."""
    llm = make(target, kind, paths)
    fresh = make(target, kind, paths, adaptive=False)
    eng = llm.engine
    eng.spec.adaptive = scripted_steps(SCRIPT)  # type: ignore[union-attr]
    p = prompts(1, seed=3)[0]
    req = eng.add_request(p, GREEDY)
    checked = 0
    while eng.has_unfinished():
        before = eng.spec.adaptive.chosen[0]  # type: ignore[union-attr]
        eng.step()
        ran_plain = eng.spec.adaptive.chosen[0] > before  # type: ignore[union-attr]
        if req.finished or req.in_prefill or ran_plain:
            continue
        # committed length N: a prefill of the first N - 1 tokens leaves the draft where ours is
        ref = fresh.engine.add_request(req.all_ids[: req.seq_len - 1], SamplingParams(temperature=0.0, max_tokens=2))
        fresh.engine.step()
        assert ref.output_ids == [req.all_ids[-1]]
        tok, hid = draft_state(llm, req.row)  # type: ignore[arg-type]
        ref_tok, ref_hid = draft_state(fresh, ref.row)  # type: ignore[arg-type]
        fresh.engine.abort(ref.request_id)
        assert tok == ref_tok, f"after {req.seq_len} tokens"
        if hid is not None:
            torch.testing.assert_close(hid, ref_hid, atol=1e-4, rtol=1e-4)
        checked += 1
    assert checked >= 4
    assert req.output_ids == reference([p])[0]


@pytest.mark.parametrize("kind", ["ngram", "eagle", "eagle3", "other"])
def test_lossless_whatever_s_runs(target, reference, paths, kind: str) -> None:  # noqa: ANN001
    """A mixed batch through a script of S values (0 included), requests joining mid-stream."""
    llm = make(target, kind, paths)
    eng = llm.engine
    eng.spec.adaptive = scripted_steps(SCRIPT)  # type: ignore[union-attr]
    ps = prompts(4, seed=21)
    reqs = [eng.add_request(ps[0], GREEDY)]
    steps = 0
    while eng.has_unfinished() or len(reqs) < len(ps):
        eng.step()
        steps += 1
        if steps % 4 == 0 and len(reqs) < len(ps):
            reqs.append(eng.add_request(ps[len(reqs)], GREEDY))
    assert [r.output_ids for r in reqs] == reference(ps)
    assert eng.spec.adaptive.chosen[0] > 0 and eng.spec_stats.num_drafts > 0  # type: ignore[union-attr]
    assert eng.allocator.used_tokens == 0


class _Clock:
    """A stand-in for the worker's ``time`` module: the test decides what each iteration costs."""

    def __init__(self) -> None:
        self.t = 0.0

    def perf_counter(self) -> float:
        return self.t


def test_unaccepted_drafts_give_plain_steps_and_the_plain_output(target, reference, eagle_head, monkeypatch) -> None:  # noqa: ANN001
    """A random EAGLE head is (almost) never accepted: adaptive S settles on S = 0 after trying
    S = 1, and the output is the plain greedy one. Iteration costs come from a fake clock (a
    plain step 10 ms, each draft +6 ms, as on a CPU) so the choice does not depend on how busy
    the machine running the test is."""
    from updraft.spec import worker

    clock = _Clock()
    monkeypatch.setattr(worker, "time", clock)
    speculate, plain = worker.SpecWorker.speculate, worker.SpecWorker.plain

    def timed_speculate(self, reqs, s):  # noqa: ANN001, ANN202
        clock.t += 0.010 + 0.006 * s
        return speculate(self, reqs, s)

    def timed_plain(self, reqs):  # noqa: ANN001, ANN202
        clock.t += 0.010
        return plain(self, reqs)

    monkeypatch.setattr(worker.SpecWorker, "speculate", timed_speculate)
    monkeypatch.setattr(worker.SpecWorker, "plain", timed_plain)
    llm = LLM(str(target), device="cpu", progress=False,
              speculative_config={"method": "eagle", "model": str(eagle_head), "num_speculative_tokens": 3})
    ps = prompts(1, seed=4)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    chosen = llm.engine.spec.adaptive.chosen  # type: ignore[union-attr]
    assert chosen[0] >= 0.7 * sum(chosen.values()), chosen
    assert chosen[3] == 0, chosen  # never reached: S = 2 and S = 3 cost more and gain nothing


def test_pinned_s_and_plain_only(target, reference, eagle_head) -> None:  # noqa: ANN001
    """Adaptive off: every iteration drafts num_steps; adaptive_steps=[0]: every step is plain."""
    ps = prompts(2, seed=8)
    for extra, want in (({"adaptive": False}, {3}), ({"adaptive_steps": [0]}, {0})):
        cfg = {"method": "eagle", "model": str(eagle_head), "num_speculative_tokens": 3, **extra}
        llm = LLM(str(target), device="cpu", progress=False, speculative_config=cfg)
        outs = llm.generate(ps, GREEDY)
        assert [o.outputs[0].token_ids for o in outs] == reference(ps)
        assert set(llm.engine.spec.adaptive.chosen) == want  # type: ignore[union-attr]
        stats = llm.engine.spec_stats
        assert stats.num_draft_tokens == 3 * stats.num_drafts and (stats.num_drafts > 0) == (want == {3})


@pytest.mark.parametrize("kind", ["ngram", "eagle3"])
def test_unseeded_sampled_rows_through_every_s(target, reference, paths, kind: str) -> None:  # noqa: ANN001
    """Sampled rows without a seed let adaptive S run S = 0 (seeded ones pin S): a plain step's
    accept must sample the bonus from the target alone. A mixed batch through the script finishes
    every request with all its tokens, and its greedy rows still equal plain greedy."""
    llm = make(target, kind, paths)
    eng = llm.engine
    eng.spec.adaptive = scripted_steps(SCRIPT)  # type: ignore[union-attr]
    ps = prompts(3, seed=30)
    sampled = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=20, ignore_eos=True)
    reqs = [eng.add_request(ps[0], sampled), eng.add_request(ps[1], GREEDY), eng.add_request(ps[2], sampled)]
    while eng.has_unfinished():
        eng.step()
    assert [r.error for r in reqs] == [None, None, None]
    assert [len(r.output_ids) for r in reqs] == [20, 20, 20]
    assert reqs[1].output_ids == reference([ps[1]])[0]
    assert eng.spec.adaptive.chosen[0] > 0 and eng.spec_stats.num_drafts > 0  # type: ignore[union-attr]

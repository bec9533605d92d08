"""Speculative decoding inside the engine: lossless greedy for every proposer x {v1, v2} x
{batch 1, batch 8 mixed lengths}; a target drafting for itself accepts everything."""

from __future__ import annotations

import pytest

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.testing import repeating_prompts as prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)  # = conftest.SPEC_GREEDY


def spec_config(kind: str, version: str, paths: dict) -> dict:
    cfg: dict = {"num_steps": 3, "draft_extend": version, "adaptive": False}  # every iteration S = 3
    if kind == "ngram":
        cfg.update(method="ngram", ngram_min=1, ngram_max=3)
    elif kind == "self":
        cfg.update(method="standalone", draft_model=str(paths["target"]))
    elif kind == "other":
        cfg.update(method="standalone", draft_model=str(paths["other"]))
    else:
        cfg.update(method=kind, draft_model=str(paths[kind]))
    return cfg


@pytest.mark.parametrize("version", ["v2", "v1"])
@pytest.mark.parametrize("kind", ["ngram", "eagle", "eagle3", "self", "other"])
@pytest.mark.parametrize("bsz", [1, 8])
def test_lossless_greedy(tiny_checkpoint, target, reference, eagle_head, eagle3_head, kind: str, version: str, bsz: int) -> None:  # noqa: ANN001
    paths = {"target": target, "other": tiny_checkpoint("llama", seed=5), "eagle": eagle_head, "eagle3": eagle3_head}
    llm = LLM(str(target), device="cpu", progress=False, speculative_config=spec_config(kind, version, paths))
    ps = prompts(bsz, seed=bsz)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    stats = llm.engine.spec_stats
    assert stats.num_drafts > 0 and stats.num_draft_tokens == 3 * stats.num_drafts
    if kind == "self":
        # The target as its own draft: every full step accepts all S drafts.
        for o in outs:
            spec = o.metrics["spec"]
            assert spec["num_accepted_tokens"] == spec["num_draft_tokens"], spec
    assert llm.engine.allocator.used_tokens == 0


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_lossless_greedy_with_a_deeper_eagle3_head(target, reference, eagle3_deep_head, version: str) -> None:  # noqa: ANN001
    """The per-phase path with a three-layer EAGLE-3 head: exact greedy outputs at batch 8."""
    llm = LLM(str(target), device="cpu", progress=False,
              speculative_config=spec_config("eagle3", version, {"eagle3": eagle3_deep_head}))
    assert llm.engine.spec is not None and llm.engine.spec.proposer.runner.kv_pool.num_layers == 3  # type: ignore[attr-defined]
    ps = prompts(8, seed=21)
    assert [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)] == reference(ps)
    assert llm.engine.allocator.used_tokens == 0


def test_self_draft_accept_length_is_full(target) -> None:  # noqa: ANN001
    llm = LLM(str(target), device="cpu", progress=False, speculative_config={"method": "standalone", "model": str(target), "num_speculative_tokens": 4, "adaptive": False})
    out = llm.generate([[1, 2, 3, 4, 5]], SamplingParams(temperature=0, max_tokens=21, ignore_eos=True))[0]
    spec = out.metrics["spec"]
    assert spec["mean_accept_length"] == 5.0 and spec["accepted_per_position"] == [4, 4, 4, 4]


def test_stop_and_max_tokens_inside_an_accepted_block(target, reference) -> None:  # noqa: ANN001
    """Self-drafting accepts whole blocks, so max_tokens / stop land inside them; nothing after
    the limit is emitted."""
    llm = LLM(str(target), device="cpu", progress=False, speculative_config={"method": "standalone", "model": str(target), "num_speculative_tokens": 4, "adaptive": False})
    ps = prompts(3, seed=7)
    ref = reference(ps)
    for n in (1, 2, 3, 7):
        outs = llm.generate(ps, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
        assert [o.outputs[0].token_ids for o in outs] == [r[:n] for r in ref]
    stop_tok = ref[0][6]
    outs = llm.generate(ps[:1], SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop_tok]))
    got = outs[0].outputs[0].token_ids
    assert got == ref[0][: ref[0].index(stop_tok) + 1] and outs[0].outputs[0].finish_reason == "stop"


def test_spec_with_kv_pressure_and_joins(target, reference, eagle_head) -> None:  # noqa: ANN001
    """Requests join mid-stream, the pool forces waiting and preemption; still lossless."""
    llm = LLM(
        str(target), device="cpu", progress=False, max_total_tokens=90,
        speculative_config={"method": "eagle", "model": str(eagle_head), "num_speculative_tokens": 3},
    )
    eng = llm.engine
    ps = prompts(6, seed=11)
    ref = reference(ps)
    reqs = [eng.add_request(ps[0], GREEDY), eng.add_request(ps[1], GREEDY)]
    step = 0
    while eng.has_unfinished() or len(reqs) < len(ps):
        eng.step()
        step += 1
        if step % 3 == 0 and len(reqs) < len(ps):
            reqs.append(eng.add_request(ps[len(reqs)], GREEDY))
    assert [r.output_ids for r in reqs] == ref
    assert eng.stats.preemptions > 0
    assert eng.allocator.used_tokens == 0


def test_sampling_with_speculation_runs_and_is_seeded(target, eagle3_head) -> None:  # noqa: ANN001
    cfg = {"method": "eagle3", "model": str(eagle3_head), "num_speculative_tokens": 3}
    llm = LLM(str(target), device="cpu", progress=False, speculative_config=cfg)
    p = SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=16, ignore_eos=True)
    a = llm.generate([[1, 2, 3]], p)[0].outputs[0].token_ids
    b = llm.generate([[1, 2, 3], [4, 5]], [p, p])[0].outputs[0].token_ids
    assert a == b and len(a) == 16

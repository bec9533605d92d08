"""N-gram drafting inside the fused iteration (lookups in per-row token histories on the device)
under the CPU graph emulator: greedy outputs equal plain greedy and the acceptance counters equal
the per-phase n-gram path's (same lookups, so same accepted drafts) x overlap on/off x batch 1
and 8 mixed lengths; adaptive S; sampled iterations (top-k 1 equals greedy, seeded runs repeat);
stops and max_tokens inside accepted blocks; hand-over to and from the per-phase path; the device
history equals every decoding request's tokens after every step (preemption and re-admission
included); host ops per iteration."""

from __future__ import annotations

import dataclasses

import pytest

from updraft.engine.engine import Engine
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.testing import repeating_prompts as prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)  # = conftest.SPEC_GREEDY
NGRAM = {"method": "ngram", "num_steps": 3, "ngram_min": 1, "ngram_max": 3, "adaptive": False}


def ngram_llm(target, *, overlap: bool = True, spec: dict | None = None, **kw) -> LLM:  # noqa: ANN001
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 8],
              disable_overlap=not overlap, speculative_config=spec or NGRAM, **kw)
    drv = llm.engine.driver
    assert drv is not None and drv.fused.ngram is not None, llm.engine.graph_log
    s = llm.engine.config.speculative.num_steps
    # KV lookahead: an iteration in flight commits up to S + 1 tokens, the next writes S past them
    assert llm.engine.lookahead == (2 * s + 1 if overlap else s)
    return llm


@pytest.fixture(scope="module")
def fused(target) -> dict[bool, LLM]:  # noqa: ANN001
    """overlap -> a fused n-gram engine with S = 3 (shared by the tests of this module)."""
    return {overlap: ngram_llm(target, overlap=overlap) for overlap in (True, False)}


@pytest.fixture(scope="module")
def per_phase(target) -> LLM:  # noqa: ANN001
    llm = LLM(str(target), device="cpu", progress=False, speculative_config=NGRAM)
    assert llm.engine.driver is None
    return llm


def check_histories(eng: Engine) -> int:
    """Every decoding request's device history equals its tokens (the device may be ahead under
    overlap, past the host's length). Returns how many requests were checked."""
    drv = eng.driver
    assert drv is not None and drv.fused.ngram is not None
    ng = drv.fused.ngram
    checked = 0
    for req in eng.scheduler.running:
        if req.in_prefill or req.finished or req.row is None:
            continue
        n = req.seq_len
        assert ng.hist[req.row, ng.pad : ng.pad + n].tolist() == req.all_ids, req.request_id
        checked += 1
    return checked


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("bsz", [1, 8])
def test_ngram_fused_lossless_and_counters_equal_per_phase(fused, per_phase, reference, overlap: bool, bsz: int) -> None:  # noqa: ANN001
    llm = fused[overlap]
    eng = llm.engine
    launches = eng.driver.launches
    ps = prompts(bsz, seed=30 + bsz)
    outs = llm.generate(ps, dataclasses.replace(GREEDY, max_tokens=32))
    ref = per_phase.generate(ps, dataclasses.replace(GREEDY, max_tokens=32))
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in ref]
    assert [o.outputs[0].token_ids[:20] for o in outs] == reference(ps)
    # the same lookups: the same drafts accepted at the same positions, request by request
    assert [o.metrics["spec"] for o in outs] == [o.metrics["spec"] for o in ref]
    assert sum(o.metrics["spec"]["num_accepted_tokens"] for o in outs) > 0, "nothing accepted: the test checks little"
    assert eng.driver.launches > launches
    assert eng.runner.path_counts.get("TARGET_VERIFY graph", 0) == 0, eng.runner.path_counts  # no per-phase verify
    assert eng.allocator.used_tokens == 0 and eng.req_pool.num_free == eng.req_pool.max_reqs
    eng.allocator.check_consistency()


def test_ngram_fused_adaptive_lossless(target, reference) -> None:  # noqa: ANN001
    llm = ngram_llm(target, spec=NGRAM | {"adaptive": True, "adaptive_steps": [0, 1, 3]})
    ps = prompts(8, seed=18)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    drv = llm.engine.driver
    chosen = drv.chosen_steps()
    assert sum(chosen.values()) == drv.launches and len(chosen) >= 2, chosen
    stats = llm.engine.spec_stats  # positions 1..3 proposed by S = 3 steps, position 1 by S = 1 ones too
    assert stats.num_drafts == stats.proposed_per_pos[0] > stats.proposed_per_pos[1] == stats.proposed_per_pos[2] > 0
    assert stats.num_draft_tokens == sum(stats.proposed_per_pos)
    assert llm.engine.allocator.used_tokens == 0


def test_ngram_fused_sampled_top_k_1_equals_greedy_and_seeded_runs_repeat(fused, reference) -> None:  # noqa: ANN001
    """Sampled graphs (rejection with q one-hot at each lookup): top-k 1 must give the greedy
    tokens exactly, beside greedy rows in the same batch; a seeded T 0.8 run repeats."""
    llm = fused[True]
    ps = prompts(4, seed=12)
    topk1 = SamplingParams(temperature=0.9, top_k=1, max_tokens=20, ignore_eos=True, seed=1)
    outs = llm.generate(ps, [topk1, GREEDY, topk1, topk1])
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    seeded = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=16, seed=7, ignore_eos=True)
    runs = [[o.outputs[0].token_ids for o in llm.generate(ps, seeded)] for _ in range(2)]
    assert runs[0] == runs[1] and all(len(r) == 16 for r in runs[0])
    assert runs[0] != [r[:16] for r in reference(ps)], "temperature 0.8 sampled exactly the greedy tokens"
    assert llm.engine.allocator.used_tokens == 0


@pytest.mark.parametrize("overlap", [True, False])
def test_ngram_fused_stops_inside_accepted_blocks(fused, reference, overlap: bool) -> None:  # noqa: ANN001
    """Every max_tokens 1..16 and a stop id at several positions: nothing after the limit."""
    llm = fused[overlap]
    p = prompts(1, seed=31)[0]
    ref = reference([p])[0]
    n_max = list(range(1, 17))
    outs = llm.generate([p] * len(n_max), [dataclasses.replace(GREEDY, max_tokens=n) for n in n_max])
    assert [o.outputs[0].token_ids for o in outs] == [ref[:n] for n in n_max]
    stops = [ref[k] for k in (2, 5, 9, 13)]
    outs = llm.generate([p] * len(stops), [dataclasses.replace(GREEDY, stop_token_ids=[t]) for t in stops])
    for o, t in zip(outs, stops):
        assert o.outputs[0].token_ids == ref[: ref.index(t) + 1] and o.outputs[0].finish_reason == "stop"
    assert llm.engine.allocator.used_tokens == 0 and llm.engine.req_pool.num_free == llm.engine.req_pool.max_reqs


def test_ngram_fused_abort_mid_flight_frees_kv_once(fused, abort_mid_flight) -> None:  # noqa: ANN001
    eng = fused[True].engine
    reqs = abort_mid_flight(eng, dataclasses.replace(GREEDY, max_tokens=30))
    assert reqs[1].finish_reason == "abort" and reqs[0].finish_reason == "length" and len(reqs[0].output_ids) == 30
    assert eng.allocator.used_tokens == 0 and eng.req_pool.num_free == eng.req_pool.max_reqs
    eng.allocator.check_consistency()


def test_ngram_fused_hands_over_to_the_per_phase_path(fused, reference) -> None:  # noqa: ANN001
    """A penalty request and a logprobs request take the per-phase path (which drains first);
    the device histories follow the host's tokens after every step, on either path."""
    llm = fused[True]
    eng = llm.engine
    ps = prompts(4, seed=3)
    params = [GREEDY, GREEDY, dataclasses.replace(GREEDY, max_tokens=6, logprobs=1),
              dataclasses.replace(GREEDY, max_tokens=9, repetition_penalty=1.2)]
    launches = eng.driver.launches
    reqs = [eng.add_request(p, q) for p, q in zip(ps, params)]
    checked = 0
    while eng.has_unfinished():
        eng.step()
        checked += check_histories(eng)
    assert checked > 10
    ref = reference(ps)
    assert [r.output_ids for r in reqs[:2]] == ref[:2] and reqs[2].output_ids == ref[2][:6]
    assert eng.driver.launches > launches and eng.runner.path_counts.get("TARGET_VERIFY graph", 0) > 0
    assert eng.allocator.used_tokens == 0


def test_ngram_fused_preemption_rewrites_histories(target, reference) -> None:  # noqa: ANN001
    llm = ngram_llm(target, max_total_tokens=160)
    eng = llm.engine
    ps = prompts(6, seed=4)
    reqs = [eng.add_request(p, GREEDY) for p in ps]
    checked = 0
    while eng.has_unfinished():
        eng.step()
        checked += check_histories(eng)
    assert [r.output_ids for r in reqs] == reference(ps)
    assert eng.stats.preemptions > 0, "the pool was meant to force preemptions"
    assert checked > 20 and eng.driver.launches > 0
    assert eng.allocator.used_tokens == 0


def test_host_ops_per_fused_ngram_iteration_within_budget(fused, step_ops) -> None:  # noqa: ANN001
    """Host tensor ops per n-gram iteration (bs 1, steady state, overlap), counted over
    Engine.step() as in test_fused.py (``step_ops``)."""
    eng = fused[True].engine
    req = eng.add_request(prompts(1, seed=1)[0], SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True))
    while len(req.output_ids) < 2:
        eng.step()
    eng.step()
    per_iter = step_ops(eng, 8)
    assert per_iter <= 10, f"{per_iter:.1f} host tensor ops per n-gram iteration"
    while eng.has_unfinished():
        eng.step()

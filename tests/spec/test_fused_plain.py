"""Plain decoding through the fused machinery (no draft, S = 0, a DECODE forward per replay) with
overlap, under the CPU graph emulator: outputs equal the per-step path in fp32 (greedy, bs 1 and
8 mixed lengths); seeded sampling repeats; stops, max_tokens and aborts one step late emit
nothing past the stop and free every KV slot exactly once; penalties and logprobs requests
switch to the per-step path and back."""

from __future__ import annotations

import pytest

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.testing import repeating_prompts as prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)  # = conftest.SPEC_GREEDY


def plain_llm(target, **kw) -> LLM:  # noqa: ANN001
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4, 8], **kw)
    drv = llm.engine.driver
    assert drv is not None and drv.fused.drafter is None, llm.engine.graph_log
    assert llm.engine.lookahead == 1  # the step in flight commits one token the host has not seen
    return llm


@pytest.mark.parametrize("bsz", [1, 8])
def test_plain_overlap_equals_per_step_greedy(target, reference, bsz: int) -> None:  # noqa: ANN001
    llm = plain_llm(target)
    ps = prompts(bsz, seed=20 + bsz)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    eng = llm.engine
    assert eng.driver is not None and eng.driver.launches >= 19
    assert eng.driver.chosen_steps() == {}  # no speculation to report
    assert eng.runner.path_counts.get("DECODE graph", 0) == 0, eng.runner.path_counts  # every decode step fused
    assert eng.allocator.used_tokens == 0 and eng.req_pool.num_free == eng.req_pool.max_reqs
    eng.allocator.check_consistency()


def test_no_overlap_keeps_the_per_step_path(target) -> None:  # noqa: ANN001
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2], disable_overlap=True)
    assert llm.engine.driver is None and llm.engine.lookahead == 0
    llm.generate(prompts(1, seed=1), GREEDY)
    assert llm.engine.runner.path_counts.get("DECODE graph", 0) > 0


def test_plain_overlap_seeded_sampling_repeats(target) -> None:  # noqa: ANN001
    ps = prompts(3, seed=5)
    params = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, max_tokens=16, seed=7, ignore_eos=True)
    runs = [[o.outputs[0].token_ids for o in plain_llm(target).generate(ps, params)] for _ in range(2)]
    assert runs[0] == runs[1] and all(len(r) == 16 for r in runs[0])
    greedy = [o.outputs[0].token_ids for o in plain_llm(target).generate(ps, GREEDY)]
    assert runs[0] != [g[:16] for g in greedy], "temperature 0.8 sampled exactly the greedy tokens"


def test_plain_overlap_stops_and_max_tokens(target, reference) -> None:  # noqa: ANN001
    ps = prompts(3, seed=9)
    ref = reference(ps)
    stop_at = ref[0][5]
    llm = plain_llm(target)
    params = [SamplingParams(temperature=0.0, max_tokens=20, stop_token_ids=[stop_at], ignore_eos=True),
              SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True), GREEDY]
    outs = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
    assert outs[0] == ref[0][: ref[0].index(stop_at) + 1]
    assert outs[1] == ref[1][:7] and outs[2] == ref[2]
    assert llm.engine.allocator.used_tokens == 0


def test_plain_overlap_abort_mid_flight_frees_kv_once(target) -> None:  # noqa: ANN001
    eng = plain_llm(target).engine
    reqs = [eng.add_request(p, SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)) for p in prompts(3, seed=2)]
    for _ in range(6):
        eng.step()
    assert eng.driver is not None and eng.driver.inflight is not None, "expected a step in flight"
    assert eng.abort(reqs[1].request_id)
    assert reqs[1].row is not None, "KV must survive until the step in flight is done"
    while eng.has_unfinished():
        eng.step()
    assert reqs[1].finish_reason == "abort" and reqs[0].finish_reason == "length"
    assert len(reqs[0].output_ids) == 30
    assert eng.allocator.used_tokens == 0 and eng.req_pool.num_free == eng.req_pool.max_reqs
    eng.allocator.check_consistency()


def test_plain_overlap_mixes_with_per_step_requests(target, reference) -> None:  # noqa: ANN001
    """A logprobs request and a penalty request run per step (the step in flight drains first);
    the greedy requests beside them stay exact."""
    ps = prompts(4, seed=3)
    llm = plain_llm(target)
    params = [GREEDY, GREEDY,
              SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=1),
              SamplingParams(temperature=0.0, max_tokens=9, ignore_eos=True, repetition_penalty=1.2)]
    outs = llm.generate(ps, params)
    assert [o.outputs[0].token_ids for o in outs[:2]] == reference(ps[:2])
    assert outs[2].outputs[0].token_ids == reference(ps[2:3])[0][:6]
    assert llm.engine.driver is not None and llm.engine.driver.launches > 0
    assert llm.engine.runner.path_counts.get("DECODE graph", 0) > 0
    assert llm.engine.allocator.used_tokens == 0


def test_plain_overlap_preemption_under_kv_pressure(target, reference) -> None:  # noqa: ANN001
    ps = prompts(6, seed=4)
    llm = plain_llm(target, max_total_tokens=120)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    assert llm.engine.stats.preemptions > 0, "the pool was meant to force preemptions"
    assert llm.engine.allocator.used_tokens == 0


def test_rng_offset_advances_once_per_step(target) -> None:  # noqa: ANN001
    """The graph advances each real row's RNG offset by one per replay (a frozen offset would
    draw the same numbers every step); the padding row stays at zero."""
    eng = plain_llm(target).engine
    drv = eng.driver
    assert drv is not None
    req = eng.add_request(prompts(1, seed=8)[0], SamplingParams(temperature=0.9, max_tokens=12, seed=3, ignore_eos=True))
    while not req.output_ids:
        eng.step()
    state = drv.fused.state
    off0, launches0 = int(state.offset[req.row]), drv.launches
    for _ in range(5):
        eng.step()
    assert drv.launches - launches0 == 5
    assert int(state.offset[req.row]) - off0 == 5
    assert int(state.offset[0]) == 0


def test_queue_beyond_the_batch_keeps_overlapping(target, reference) -> None:  # noqa: ANN001
    """Requests waiting while every running slot is taken cannot be admitted before the host
    reads a finish: the pipeline keeps overlapping and drains only around arrivals and finishes
    (it used to drain every step while anything waited, serialising host and device)."""
    ps = prompts(3, seed=41)
    llm = plain_llm(target, max_running_requests=1)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    drv = llm.engine.driver
    assert drv is not None and drv.launches >= 3 * 19
    assert drv.drains <= 3 * 3, (drv.drains, drv.launches)  # a few per request, not one per step
    assert llm.engine.allocator.used_tokens == 0

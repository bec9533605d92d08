"""The engine end to end on a tiny random model: continuous batching, chunked prefill, KV
pressure (waiting, preemption), aborts, sampling parameters, and one-line errors."""

from __future__ import annotations

import random

import pytest
import torch

from updraft.config import EngineConfig
from updraft.engine.engine import Engine
from updraft.errors import RequestError
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def make_llm(folder, **kw) -> LLM:  # noqa: ANN001
    kw.setdefault("progress", False)
    return LLM(str(folder), device="cpu", **kw)


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(0, 256) for _ in range(rng.randrange(3, 40))] for _ in range(n)]


@pytest.fixture(scope="module")
def folder(tiny_checkpoint):  # noqa: ANN001, ANN201
    return tiny_checkpoint("llama")


@pytest.fixture(scope="module")
def llm(folder) -> LLM:  # noqa: ANN001
    return make_llm(folder)


def test_batch_invariance(llm: LLM) -> None:
    ps = prompts(8, seed=1)
    together = [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)]
    for i in (0, 5):
        alone = llm.generate([ps[i]], GREEDY)[0].outputs[0].token_ids
        assert alone == together[i]
        assert len(alone) == GREEDY.max_tokens


def test_chunked_prefill_equals_one_shot(folder, llm: LLM) -> None:  # noqa: ANN001
    ps = prompts(4, seed=2) + [[7] * 60]
    ref = [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)]
    chunked = make_llm(folder, chunked_prefill_size=5)
    got = [o.outputs[0].token_ids for o in chunked.generate(ps, GREEDY)]
    assert got == ref
    assert chunked.engine.stats.prefill_steps > len(ps)  # really chunked


@pytest.mark.parametrize("page_size", [1, 4])
def test_requests_wait_and_are_preempted_when_kv_runs_out(folder, llm: LLM, page_size: int) -> None:  # noqa: ANN001
    ps = prompts(6, seed=3)
    ref = [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)]
    small = make_llm(folder, max_total_tokens=80, page_size=page_size)
    outs = small.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == ref
    assert all(o.outputs[0].finish_reason == "length" for o in outs)
    eng = small.engine
    assert eng.allocator.used_tokens == 0
    eng.allocator.check_consistency()
    assert eng.stats.preemptions > 0  # the pool was really too small to run all at once


def test_random_aborts_free_everything(folder) -> None:  # noqa: ANN001
    llm = make_llm(folder, max_total_tokens=120)
    eng = llm.engine
    rng = random.Random(0)
    reqs = [eng.add_request(p, GREEDY) for p in prompts(12, seed=4)]
    finished: dict[str, str] = {}
    steps = 0
    while eng.has_unfinished():
        for out in eng.step():
            if out.finished:
                finished[out.request_id] = out.finish_reason or ""
        live = [r for r in reqs if not r.finished]
        if live and rng.random() < 0.3:
            eng.abort(rng.choice(live).request_id)
        eng.allocator.check_consistency()
        steps += 1
        assert steps < 2000
    assert set(finished) == {r.request_id for r in reqs}  # no request lost
    assert set(finished.values()) <= {"length", "abort"}
    assert eng.allocator.used_tokens == 0 and eng.req_pool.num_free == eng.req_pool.max_reqs


def test_sampling_seeds_n_stop_and_logprobs(llm: LLM) -> None:
    p = SamplingParams(temperature=1.0, top_k=20, top_p=0.9, seed=11, max_tokens=12, ignore_eos=True, n=3, logprobs=2)
    a = llm.generate(["hello world"], p)[0]
    b = llm.generate(["hello world", "other prompt"], [p, p])[0]
    assert [o.token_ids for o in a.outputs] == [o.token_ids for o in b.outputs]  # seeds, batch-independent
    assert len(a.outputs) == 3 and len({tuple(o.token_ids) for o in a.outputs}) > 1
    lp = a.outputs[0].logprobs
    assert lp is not None and len(lp) == 12 and len(lp[0]["top"]) == 2 and lp[0]["logprob"] <= 0
    # stop string: the text ends right before it, and nothing after it is emitted
    full = llm.generate(["abc"], GREEDY)[0].outputs[0].text
    stop = full[5:8]
    cut = llm.generate(["abc"], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, stop=[stop]))[0].outputs[0]
    assert cut.finish_reason == "stop" and cut.text == full[: full.index(stop)]


def test_penalties_change_output(llm: LLM) -> None:
    base = llm.generate(["x"], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))[0].outputs[0].token_ids
    pen = llm.generate(["x"], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, repetition_penalty=5.0))[0]
    toks = pen.outputs[0].token_ids
    assert toks != base
    assert len(set(toks)) >= len(set(base))


BAD_PARAMS = [
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=-2), "top_k"),
    (dict(max_tokens=0), "max_tokens"),
]


@pytest.mark.parametrize("kwargs,field", BAD_PARAMS)
def test_bad_sampling_params_are_one_line_errors(llm: LLM, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError) as exc:
        llm.generate(["hi"], SamplingParams(**kwargs))
    msg = str(exc.value)
    assert field in msg and "\n" not in msg and repr(kwargs[field]) in msg


def test_bad_prompts_fail_alone(llm: LLM) -> None:
    eng = llm.engine
    good = eng.add_request([1, 2, 3], GREEDY)
    with pytest.raises(RequestError, match="empty"):
        eng.add_request("", GREEDY)
    with pytest.raises(RequestError, match="context"):
        eng.add_request([5] * (eng.max_model_len + 3), GREEDY)
    with pytest.raises(RequestError, match="vocabulary"):
        eng.add_request([10**6], GREEDY)
    while eng.has_unfinished():
        eng.step()
    assert good.finish_reason == "length" and len(good.output_ids) == GREEDY.max_tokens


def test_forward_failure_and_nan_fail_one_request(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    eng = llm.engine
    reqs = [eng.add_request(p, GREEDY) for p in prompts(4, seed=9)]
    eng.inject_failure(reqs[1].request_id)
    while eng.has_unfinished():
        eng.step()
    assert reqs[1].finish_reason == "error" and "injected" in (reqs[1].error or "")
    assert all(r.finish_reason == "length" for i, r in enumerate(reqs) if i != 1)
    # NaN logits for one row: that request fails, the others finish.
    real = eng.runner.forward
    calls = {"n": 0}

    def poisoned(batch):  # noqa: ANN001, ANN202
        out = real(batch)
        calls["n"] += 1
        if calls["n"] == 3 and out.logits.shape[0] > 1:
            out.logits[0] = float("nan")
        return out

    monkeypatch.setattr(eng.runner, "forward", poisoned)
    reqs = [eng.add_request(p, GREEDY) for p in prompts(3, seed=10)]
    while eng.has_unfinished():
        eng.step()
    errors = [r for r in reqs if r.finish_reason == "error"]
    assert len(errors) == 1 and "non-finite" in (errors[0].error or "")
    assert eng.allocator.used_tokens == 0


def test_engine_config_errors_name_the_value(folder) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match="page_size=0"):
        EngineConfig(model=str(folder), page_size=0).validate()
    with pytest.raises(ValueError, match="attention_backend='nope'"):
        EngineConfig(model=str(folder), attention_backend="nope").validate()
    with pytest.raises(ValueError, match="sampled_graphs='lazy'"):
        EngineConfig(model=str(folder), sampled_graphs="lazy").validate()
    with pytest.raises(ValueError, match="unknown engine option"):
        EngineConfig.from_kwargs(model=str(folder), bogus=1)
    # auto: at start on CUDA, on first use under the CPU emulator (a capture there is an eager run)
    assert not EngineConfig(model=str(folder), device="cpu").sampled_graphs_at_start()
    assert EngineConfig(model=str(folder), device="cpu", sampled_graphs="start").sampled_graphs_at_start()


def test_context_limit_finishes_with_length(folder) -> None:  # noqa: ANN001
    llm = make_llm(folder, max_model_len=32)
    out = llm.generate([[3] * 20], SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))[0].outputs[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 32 - 20


def test_engine_on_cpu_defaults(folder) -> None:  # noqa: ANN001
    eng = Engine(EngineConfig(model=str(folder), device="cpu", progress=False))
    assert eng.dtype == torch.float32 and eng.backend_name == "torch_native"
    assert eng.kv_capacity_tokens >= eng.max_model_len

"""The fused iteration's work beside the critical path (``updraft.runtime.side_stream``; in place
off CUDA) and the launches it leaves out, each against the bodies without it, iteration by
iteration: the EAGLE-3 fc and QKV products on the side stream, the lookup assist beside the
chain (the draft picks take its locks), the first draft's norm applied by ``read_rows``."""

from __future__ import annotations

import pytest
import torch

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.testing import repeating_prompts as prompts


def _llm(target, head, kind: str = "eagle3", graph_bs: tuple[int, ...] = (1, 2, 4, 8), **spec) -> LLM:  # noqa: ANN001, ANN003
    """The fused engine over the graph emulator, S = 3 without adaptive S (``spec``: more of the
    speculative config), graphs captured at ``graph_bs`` (a test whose batch never shrinks needs its
    own size alone: each capture interprets every kernel of every phase)."""
    cfg = {"method": kind, "draft_model": str(head), "num_steps": 3, "adaptive": False, **spec}
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=list(graph_bs),
              speculative_config=cfg)
    assert llm.engine.driver is not None, llm.engine.graph_log
    return llm


def _record_commits(monkeypatch) -> list[tuple[torch.Tensor, ...]]:  # noqa: ANN001
    """Each body's (verified drafts, emitted tokens, next draft features: the draft extend's
    last accepted row of each request) as it hands them to ``commit``, appended to the list
    returned."""
    from updraft.spec import fused as fused_mod

    seen: list[tuple[torch.Tensor, ...]] = []
    real = fused_mod.commit

    def spy(out, rows, n, res, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        accept = real(out, rows, n, res, *a, **kw)
        bs, ndt = res.emitted.shape
        picked = (res.hidden if res.hidden.shape[0] == bs
                  else res.hidden.view(bs, ndt, -1)[torch.arange(bs), accept - 1])
        seen.append((res.drafts.clone(), res.emitted.clone(), picked.clone()))
        return accept

    monkeypatch.setattr(fused_mod, "commit", spy)
    return seen


def _params(sampled: bool) -> SamplingParams:
    return (SamplingParams(temperature=0.8, top_p=0.9, seed=4, max_tokens=16, ignore_eos=True) if sampled
            else SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True))


def _agree(runs: list[tuple[list[list[int]], list[tuple[torch.Tensor, ...]]]], least: int, rtol: float = 0.0) -> None:
    """Two runs (outputs, each body's ``_record_commits`` entry) agree: the same outputs, as many
    bodies (at least ``least``), each with the same drafts and emitted tokens and the same next
    draft features (``rtol`` > 0: within ``rtol`` of their largest)."""
    (outs_a, seen_a), (outs_b, seen_b) = runs
    assert outs_a == outs_b and len(seen_a) == len(seen_b) >= least
    for a, b in zip(seen_a, seen_b):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        if rtol:
            assert ((a[2] - b[2]).abs().max() / b[2].abs().max()).item() <= rtol
        else:
            assert torch.equal(a[2], b[2])


def test_eagle3_qkv_beside_under_the_kernels(target, eagle3_head, monkeypatch) -> None:  # noqa: ANN001
    """``FusedIteration.qkv_beside`` on the small-M kernels (interpreted here, the fused mid layer
    serving the draft steps and the draft extend): each forward of the head gets its mid layer's
    QKV product of its input feature computed apart, before its tokens are known (S = 3: for the
    two chain steps beside the LM head and pick before each, for the extend beside the verify's
    last layers, ``Eagle3Head.project_for``), and its QKV streams only the embedding's columns,
    adding that product. Against the bodies without it (the dual-input QKV), iteration by
    iteration: the same drafts and emitted tokens, the draft features within float32 rounding
    (another summation order), the same output."""
    from updraft import ops
    from updraft.models import fused as fused_layers
    from updraft.spec.fused import FusedIteration

    seen = _record_commits(monkeypatch)
    real_product = fused_layers.eagle3_feature_qkv
    products: list[int] = []

    monkeypatch.setattr(fused_layers, "eagle3_feature_qkv", lambda *a: products.append(1) or real_product(*a))
    real_body, bodies = FusedIteration._body, []
    monkeypatch.setattr(FusedIteration, "_body", lambda self, g: bodies.append(g.num_steps) or real_body(self, g))
    ps = prompts(1, seed=13)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    runs = []
    with ops.use_backend("triton"):
        for beside in (True, False):
            monkeypatch.setattr(FusedIteration, "qkv_beside", beside)
            seen.clear()
            products.clear()
            bodies.clear()
            llm = _llm(target, eagle3_head, graph_bs=(1,))
            outs = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
            assert llm.engine.driver is not None and bodies and set(bodies) == {3}
            assert len(products) == (3 * len(bodies) if beside else 0), (len(products), len(bodies))
            runs.append((outs, list(seen)))
    _agree(runs, 2, 1e-5)


@pytest.mark.parametrize("sampled", [False, True])
def test_eagle3_fc_beside_the_acceptance_drafts_the_same(target, eagle3_head, sampled: bool, monkeypatch) -> None:  # noqa: ANN001
    """``FusedIteration.project_beside``: the draft extend takes the head's fc output computed
    apart (``FeatureKind.PROJECTED``; on CUDA on a side stream, here in place) and gives the same
    drafts and draft-extend features, iteration by iteration, as the head projecting the target's
    layers itself."""
    from updraft.spec.fused import FusedIteration

    seen = _record_commits(monkeypatch)
    runs = []
    for beside in (True, False):
        monkeypatch.setattr(FusedIteration, "project_beside", beside)
        seen.clear()
        outs = [o.outputs[0].token_ids for o in _llm(target, eagle3_head).generate(prompts(3, seed=12), _params(sampled))]
        runs.append((outs, list(seen)))
    _agree(runs, 6)


def test_lookup_assist_beside_the_chain_drafts_the_same(target, reference, eagle3_head, monkeypatch) -> None:  # noqa: ANN001
    """``FusedIteration.assist_beside`` (greedy): the lookup runs from the body's start (on CUDA
    on a side stream of its own, joined before the first pick) and each draft pick takes its draft in
    the rows whose history repeats (``DeviceNgram.locks``, ``argmax_rows(..., lock=)``), where a
    lookup launch after the chain replaced the chain's drafts before. Against those bodies,
    iteration by iteration: the same verified drafts, emitted tokens and draft-extend features,
    plain greedy's output; the locks replaced the drafts of some rows and not of others."""
    from updraft.spec.fused import FusedIteration
    from updraft.spec.ngram_device import DeviceNgram

    seen = _record_commits(monkeypatch)
    real_locks, real_into = DeviceNgram.locks, DeviceNgram.lookup_into
    calls = {"locks": 0, "after": 0}
    taken: list[torch.Tensor] = []

    def locks(self, rows, lens, s, min_match):  # noqa: ANN001, ANN202
        out = real_locks(self, rows, lens, s, min_match)
        calls["locks"] += 1
        taken.append((out[:, 1:] >= 0).all(1) | (out[:, 1:] < 0).all(1))  # a row locks all its drafts or none
        taken.append((out[:, 1:] >= 0).any(1))
        return out

    def into(self, rows, lens, ids, min_match=0, dist=None):  # noqa: ANN001, ANN202
        calls["after"] += 1
        return real_into(self, rows, lens, ids, min_match, dist)

    monkeypatch.setattr(DeviceNgram, "locks", locks)
    monkeypatch.setattr(DeviceNgram, "lookup_into", into)
    ps = prompts(4, seed=21)
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    runs = []
    for beside in (True, False):
        monkeypatch.setattr(FusedIteration, "assist_beside", beside)
        seen.clear()
        calls.update(locks=0, after=0)
        outs = [o.outputs[0].token_ids for o in _llm(target, eagle3_head, ngram_assist=2).generate(ps, params)]
        assert outs == reference(ps)
        assert (calls["locks"] > 0, calls["after"] > 0) == (beside, not beside), calls
        runs.append((outs, list(seen)))
    _agree(runs, 6)
    whole, locked = torch.cat(taken[0::2]), torch.cat(taken[1::2])
    assert whole.all() and locked.any() and not locked.all(), locked


@pytest.mark.parametrize("sampled", [False, True])
def test_first_norm_applied_by_read_rows_drafts_the_same(target, eagle3_head, sampled: bool, monkeypatch) -> None:  # noqa: ANN001
    """``FusedIteration.norm_in_read``: ``read_rows`` (the interpreted kernel here) normalises the
    draft features it gathers and the first draft's LM head reads them
    (``Eagle3Head.logits_from_normed``), no norm launch before it. Against the bodies with that
    launch, iteration by iteration: the same drafts, emitted tokens and draft-extend features,
    greedy and seeded sampled."""
    from updraft.spec import fused as fused_mod
    from updraft.spec.fused import FusedIteration

    seen = _record_commits(monkeypatch)
    real_read, normed = fused_mod.read_rows, []

    def read(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        got = real_read(*a, **kw)
        normed.append(got.normed is not None)
        return got

    monkeypatch.setattr(fused_mod, "read_rows", read)
    runs = []
    for in_read in (True, False):
        monkeypatch.setattr(FusedIteration, "norm_in_read", in_read)
        seen.clear()
        normed.clear()
        llm = _llm(target, eagle3_head, ngram_assist=0)
        outs = [o.outputs[0].token_ids for o in llm.generate(prompts(3, seed=14), _params(sampled))]
        assert normed and set(normed) == {in_read}
        runs.append((outs, list(seen)))
    _agree(runs, 6, 1e-5)


@pytest.mark.parametrize("sampled", [False, True])
def test_extend_rows_beside_drafts_the_same(target, eagle3_head, sampled: bool, monkeypatch) -> None:  # noqa: ANN001
    """``FusedIteration.extend_rows_beside`` on the small-M kernels (interpreted): the draft
    extend's rows whose token is a draft store their keys and values beside the verify
    (``Eagle3Head.store_kv``, one launch over the block shifted by one), the acceptance (sampled:
    ``LastRowPick``, here after its dense path) or ``argmax_and_pick`` (greedy: inside the verify's
    argmax launch; the interpreted kernels) writes each request's last accepted row, and the head runs that row alone. Against the extend over every row, iteration by iteration at bs 2 (mixed lengths):
    the same drafts and emitted tokens (so every later step read the same draft KV),
    the next draft features within float32 rounding (other row counts, other tiles), the same
    output, greedy and seeded sampled."""
    from updraft import ops
    from updraft.models.eagle import Eagle3Head
    from updraft.spec import fused as fused_mod
    from updraft.spec.fused import FusedIteration

    seen = _record_commits(monkeypatch)
    calls = {"store": 0, "pick": 0}
    real_store, real_pick, real_argmax_pick = Eagle3Head.store_kv, fused_mod.pick_last_rows, fused_mod.argmax_and_pick

    def store(self, ids, qkv, batch, positions, loc):  # noqa: ANN001, ANN202
        calls["store"] += 1
        assert ids.shape[0] == batch.num_tokens - 1 == qkv.shape[0]
        return real_store(self, ids, qkv, batch, positions, loc)

    def pick(src, dst):  # noqa: ANN001, ANN202
        calls["pick"] += 1
        return real_pick(src, dst)

    monkeypatch.setattr(Eagle3Head, "store_kv", store)
    def argmax_pick(logits, src, dst, tickets):  # noqa: ANN001, ANN202
        calls["pick"] += 1
        return real_argmax_pick(logits, src, dst, tickets)

    real_of = fused_mod.LastRowPick.of

    def pick_of(src, dst):  # noqa: ANN001, ANN202
        calls["pick"] += 1
        return real_of(src, dst)

    monkeypatch.setattr(fused_mod, "pick_last_rows", pick)
    monkeypatch.setattr(fused_mod, "argmax_and_pick", argmax_pick)
    monkeypatch.setattr(fused_mod.LastRowPick, "of", pick_of)
    params = (SamplingParams(temperature=0.8, top_p=0.9, seed=4, max_tokens=10, ignore_eos=True) if sampled
              else SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True))
    runs = []
    with ops.use_backend("triton"):
        for beside in (True, False):
            monkeypatch.setattr(FusedIteration, "extend_rows_beside", beside)
            seen.clear()
            calls.update(store=0, pick=0)
            llm = _llm(target, eagle3_head, graph_bs=(2,))
            outs = [o.outputs[0].token_ids for o in llm.generate(prompts(2, seed=15), params)]
            assert (calls["store"] > 0, calls["pick"] > 0) == (beside, beside), calls
            runs.append((outs, list(seen)))
    _agree(runs, 6, 1e-5)
    # rows past the first were kept somewhere: their K/V from the side stream was read
    assert any((d[:, 0] == e[:, 0]).any() for d, e, _ in runs[0][1])


def test_sampled_pick_with_the_acceptance_drafts_the_same(target, eagle3_head, monkeypatch) -> None:  # noqa: ANN001
    """``FusedIteration.sampled_pick_in_accept`` (seeded sampled): the draft extend's last accepted
    rows picked with the acceptance (``sampled_accept``'s ``pick``: here its dense path, then the
    torch pick; the kernel's own in ``tests/spec/test_last_row.py``) against ``pick_last_rows``
    after it, iteration by iteration at bs 2: the same drafts, emitted tokens, next draft features
    and output."""
    from updraft import ops
    from updraft.spec import fused as fused_mod
    from updraft.spec.fused import FusedIteration

    seen = _record_commits(monkeypatch)
    picks: list[bool] = []
    real_of, real_pick = fused_mod.LastRowPick.of, fused_mod.pick_last_rows
    monkeypatch.setattr(fused_mod.LastRowPick, "of", lambda src, dst: picks.append(True) or real_of(src, dst))
    monkeypatch.setattr(fused_mod, "pick_last_rows", lambda src, dst: picks.append(False) or real_pick(src, dst))
    runs = []
    with ops.use_backend("triton"):
        for on in (True, False):
            monkeypatch.setattr(FusedIteration, "sampled_pick_in_accept", on)
            seen.clear()
            picks.clear()
            llm = _llm(target, eagle3_head, graph_bs=(2,))  # two requests of 16 tokens each throughout
            outs = [o.outputs[0].token_ids for o in llm.generate(prompts(2, seed=15), _params(True))]
            # on: the acceptance's pick only; off: pick_last_rows (which makes a LastRowPick itself)
            assert picks and (all(picks) if on else False in picks), picks
            runs.append((outs, list(seen)))
    _agree(runs, 6)


@pytest.mark.parametrize("sampled", [False, True])
def test_head_pick_drafts_the_same(target, eagle3_head, sampled: bool, monkeypatch) -> None:  # noqa: ANN001
    """``FusedIteration.head_pick``: the draft steps hand the LM head's input rows to the drafter
    (interpreted kernels): greedy, ``HeadPick`` (the head and its argmax without the logits, the
    lookup assist's locks applied by its reader) in place of the logits and ``argmax_rows``;
    sampled (``sampled_head_logits``), ``head_logits`` in place of ``F.linear``. Against the bodies with the logits,
    iteration by iteration at bs 1-4 (mixed lengths): the same drafts and emitted tokens, the
    next draft features within float32 rounding (greedy: the same), the same output."""
    from updraft.spec import drafter as drafter_mod
    from updraft.spec import head_pick
    from updraft.spec.fused import FusedIteration

    seen = _record_commits(monkeypatch)
    calls: list[tuple[int, bool]] = []
    real, real_logits = drafter_mod.HeadPick.__call__, head_pick.head_logits

    def spy(self, head, table, dst, lock=None):  # noqa: ANN001, ANN202
        calls.append((head.rows.shape[0], lock is not None))
        return real(self, head, table, dst, lock)

    def spy_logits(head):  # noqa: ANN001, ANN202
        calls.append((head.rows.shape[0], True))
        return real_logits(head)

    monkeypatch.setattr(drafter_mod.HeadPick, "__call__", spy)
    monkeypatch.setattr(head_pick, "head_logits", spy_logits)
    monkeypatch.setattr(FusedIteration, "sampled_head_logits", True)
    runs = []
    for on in (True, False):
        monkeypatch.setattr(FusedIteration, "head_pick", on)
        seen.clear()
        calls.clear()
        llm = _llm(target, eagle3_head)
        outs = [o.outputs[0].token_ids for o in llm.generate(prompts(3, seed=16), _params(sampled))]
        assert bool(calls) == on and all(locked for _, locked in calls), calls
        runs.append((outs, list(seen)))
    _agree(runs, 6, 1e-5 if sampled else 0.0)

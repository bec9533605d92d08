"""``spec.last_row``: the draft extend's last accepted row of each request, picked in one launch
(under the Triton interpreter here, compiled on CUDA) against its torch reference and against
what the row must be: for greedy and sampled acceptance, S = 1 and 5; greedy also inside the
verify's argmax launch (``argmax_and_pick``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from updraft.batch import CaptureHidden, ForwardMode
from updraft.runtime.graphs.phase_graph import PhaseSpec, phase_inputs, static_batch
from updraft.spec import last_row as lr
from updraft.spec.verify import greedy_accept

pytest.importorskip("triton")

#: Where the kernels run: compiled on a GPU machine, interpreted elsewhere (tests/conftest.py).
DEV = "cuda" if torch.cuda.is_available() else "cpu"


class _Backend:
    fill_seq_len = 1


def case(s: int, sampled: bool, seed: int, device: str = DEV) -> lr.ExtendRows:
    gen = torch.Generator().manual_seed(seed)
    bs, ndt, h, q = 6, s + 1, 24, 40
    n = torch.randint(2, 100, (bs,), generator=gen)
    emitted = torch.randint(0, 1000, (bs, ndt), generator=gen)
    ids = torch.cat([torch.zeros(bs, 1, dtype=torch.long), emitted[:, :s].clone()], dim=1)  # drafts: a strided view
    for b in range(bs):  # drafts matching the target's picks for 0..S leading positions
        k = int(torch.randint(0, s + 1, (1,), generator=gen))
        if k < s:
            ids[b, 1 + k] = emitted[b, k] + 1
    accept = torch.randint(1, ndt + 1, (bs,), generator=gen) if sampled else None
    positions = (n[:, None] - 1 + torch.arange(ndt)).reshape(-1)
    loc = torch.randperm(1000, generator=gen)[: bs * ndt]
    feat = torch.randn(bs * ndt, h, generator=gen).to(torch.bfloat16)
    qkv = torch.randn(bs * ndt, q, generator=gen)
    rows = lr.ExtendRows(emitted, ids[:, 1:], accept, positions, loc, feat, qkv, n)
    return lr.ExtendRows(*(t.to(device) if t is not None else None for t in dataclasses.astuple(rows)))


def batch(bs: int, device: str = DEV):  # noqa: ANN201 - a ForwardBatch of one row a request
    phase = PhaseSpec(ForwardMode.DRAFT_DECODE, 1, "none", CaptureHidden.FULL)
    dev = torch.device(device)
    return static_batch(phase, phase_inputs(phase, bs, dev, torch.bfloat16), bs, _Backend(), dev)


def pick(fn, src: lr.ExtendRows) -> tuple[torch.Tensor, ...]:  # noqa: ANN001
    dst = batch(src.emitted.shape[0], str(src.emitted.device))
    if fn is lr._pick_torch:
        p = lr.LastRowPick.of(src, dst)
        p.by_torch()
        feat, qkv = p.outputs
    else:
        feat, qkv = fn(src, dst)
    return dst.input_ids.clone(), dst.positions.clone(), dst.out_cache_loc.clone(), dst.seq_lens.clone(), feat, qkv


def check(src: lr.ExtendRows) -> None:
    got = pick(lr.pick_last_rows, src)
    for g, w in zip(got, pick(lr._pick_torch, src), strict=True):
        assert torch.equal(g, w), (g, w)
    # the row itself, from the definition: the last accepted one
    bs, ndt = src.emitted.shape
    accept = src.accept if src.accept is not None else greedy_accept(src.drafts, src.emitted)[0]
    for b in range(bs):
        k = int(accept[b]) - 1
        r = b * ndt + k
        assert got[0][b] == src.emitted[b, k] and got[1][b] == src.positions[r] == src.n[b] - 1 + k
        assert got[2][b] == src.out_cache_loc[r] and got[3][b] == src.n[b] + k
        assert torch.equal(got[4][b], src.feat[r]) and torch.equal(got[5][b], src.qkv[r])
    if src.accept is None:
        assert len(set(accept.tolist())) > 1, "the case accepts different lengths"


@pytest.mark.parametrize("s", [1, 5])
@pytest.mark.parametrize("sampled", [False, True])
def test_pick_matches_the_reference_and_the_definition(s: int, sampled: bool, launches) -> None:  # noqa: ANN001
    calls = launches(lr, "_pick_kernel")
    check(case(s, sampled, seed=10 * s + sampled))
    assert calls == [1]


def _logits_for(src: lr.ExtendRows, vocab: int, seed: int) -> torch.Tensor:
    """Random logits [B * (S + 1), vocab] whose argmax is ``src.emitted``, a tie before it."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(src.emitted.numel(), vocab, generator=gen)
    flat = src.emitted.reshape(-1)
    x[torch.arange(flat.shape[0]), flat] = 10.0
    x[:, vocab - 1] = 10.0  # ties go to the first index
    return x.to(src.emitted.device)


@pytest.mark.parametrize("s", [1, 5])
def test_argmax_and_pick_in_one_launch(s: int, launches) -> None:  # noqa: ANN001
    """Greedy: the argmax written where the emitted tokens land, then the pick by the last program
    of each request (its ticket): the same as ``argmax_rows`` then the reference pick, the
    tickets left at 0, one launch."""
    calls = launches(lr, "_argmax_pick_kernel")
    want = case(s, False, seed=20 + s)
    logits = _logits_for(want, 3000, seed=s)
    src = dataclasses.replace(want, emitted=torch.full_like(want.emitted, -1))
    tickets = torch.zeros(8, dtype=torch.int32, device=DEV)
    dst = batch(src.emitted.shape[0])
    feat, qkv = lr.argmax_and_pick(logits, src, dst, tickets)
    assert calls == [1] and not tickets.any()
    assert torch.equal(src.emitted, want.emitted)
    got = (dst.input_ids, dst.positions, dst.out_cache_loc, dst.seq_lens, feat, qkv)
    for g, w in zip(got, pick(lr._pick_torch, want), strict=True):
        assert torch.equal(g, w), (g, w)
    with pytest.raises(ValueError, match="greedy only"):
        lr.argmax_and_pick(logits, dataclasses.replace(src, accept=torch.ones(6, dtype=torch.long)), dst, tickets)


def _pick_in_acceptance(s: int, device: str, launches, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from updraft.spec import rejection_kernels as rk

    monkeypatch.setattr(rk, "INTERPRET", True)
    src = case(s, True, seed=40 + s, device=device)
    bs, ndt = src.emitted.shape
    gen = torch.Generator().manual_seed(s)
    logits = torch.randn(bs, ndt, 2 * 4096 + 300, generator=gen) * 3
    drafts = src.drafts.contiguous()
    for b in range(bs):  # request b's first b % (S + 1) drafts the target all but certainly takes
        k = b % ndt
        logits[b, :k].scatter_(1, drafts[b, :k, None].cpu(), 40.0)
    temp = torch.tensor([0.7, 0.0, 1.0, 0.7, 0.0, 0.9])
    top_p = torch.tensor([0.9, 1.0, 1.0, 0.95, 0.5, 0.8])
    host = (logits, temp, torch.full((bs,), -1), top_p, torch.zeros(bs), torch.rand(bs, s, generator=gen),
            torch.rand(bs, generator=gen))
    lg, temp, top_k, top_p, min_p, ua, ur = (t.to(device) for t in host)
    args = (lg, drafts, drafts[:, :, None], torch.ones(bs, s, 1, device=device), temp, top_k, top_p, min_p, ua, ur)
    want_acc, want_em = rk.sampled_accept(*args)
    calls = launches(lr, "_pick_kernel")
    for kernels in (True, False) if device == "cpu" else (True,):
        monkeypatch.setattr(rk, "INTERPRET", kernels)
        out = dataclasses.replace(src, emitted=torch.full_like(src.emitted, -1), accept=None)
        dst = batch(bs, device)
        p = lr.LastRowPick.of(out, dst)
        acc, em = rk.sampled_accept(*args, emitted_out=out.emitted, pick=p)
        if kernels:
            assert torch.equal(acc, want_acc) and torch.equal(em, want_em)
        if s:
            assert len(set(acc.tolist())) > 1, "the case accepts different lengths"
        got = (dst.input_ids, dst.positions, dst.out_cache_loc, dst.seq_lens, *p.outputs)
        for g, w in zip(got, pick(lr._pick_torch, dataclasses.replace(src, emitted=em, accept=acc)), strict=True):
            assert torch.equal(g, w), (kernels, g, w)
    assert calls == []
    with pytest.raises(ValueError, match="emitted_out"):
        rk.sampled_accept(*args, pick=p)


@pytest.mark.parametrize("s", [0, 1, 5])
def test_pick_inside_the_sampled_acceptance(s: int, launches, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """Sampled: the acceptance's launch (``rejection_sample``'s ``pick``) writes each request's
    last accepted row as ``pick_last_rows`` would after it, for sampled rows (the drawing program,
    after its ticket: three vocabulary blocks) and greedy ones (block 0's program); the tokens and
    lengths are those of the acceptance without it; no pick launch. Also the torch path (the
    dense acceptance, then the pick)."""
    _pick_in_acceptance(s, "cpu", launches, monkeypatch)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pick_inside_the_sampled_acceptance_on_cuda(launches, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    _pick_in_acceptance(5, "cuda", launches, monkeypatch)


def test_pick_refuses_a_batch_of_other_rows() -> None:
    src = case(2, False, seed=3)
    with pytest.raises(ValueError, match="one row for each of 6 requests"):
        lr.pick_last_rows(src, batch(4))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("sampled", [False, True])
def test_pick_on_cuda(sampled: bool) -> None:
    """Both launches compiled: the pick, and (greedy) the argmax with the pick inside it over a
    target's vocabulary (the tickets left at 0 after two launches)."""
    src = case(5, sampled, seed=7, device="cuda")
    check(src)
    if sampled:
        return
    logits = _logits_for(src, 49152, seed=8).to(torch.bfloat16)
    tickets = torch.zeros(8, dtype=torch.int32, device="cuda")
    for _ in range(2):
        out = dataclasses.replace(src, emitted=torch.full_like(src.emitted, -1))
        dst = batch(6, "cuda")
        feat, qkv = lr.argmax_and_pick(logits, out, dst, tickets)
        assert torch.equal(out.emitted, src.emitted) and not tickets.any()
        for g, w in zip((dst.input_ids, dst.positions, dst.out_cache_loc, dst.seq_lens, feat, qkv),
                        pick(lr._pick_torch, src), strict=True):
            assert torch.equal(g, w), (g, w)

"""``spec.commit``: the fused iteration's last launch (under the Triton interpreter) against its
torch reference, which is the code it replaced: the same accept lengths, output block, row state
and next draft features, bitwise, for greedy and sampled acceptance, S = 0 and S > 0, without a
draft feature, with the draft extend's every row and with its last accepted row of each request
alone (``updraft.spec.last_row``), padded requests on row 0."""

from __future__ import annotations

import pytest
import torch

from updraft.runtime.row_state import RowState
from updraft.spec import commit as cm
from updraft.spec.ngram_device import DeviceNgram
from updraft.spec.verify import greedy_accept

pytest.importorskip("triton")


def case(s: int, sampled: bool, hidden: bool | str, seed: int) -> tuple[torch.Tensor, torch.Tensor, cm.Commit, RowState]:
    gen = torch.Generator().manual_seed(seed)
    rows = torch.tensor([3, 0, 5, 1, 0, 7])  # two padded requests on row 0
    bs, ndt = rows.shape[0], s + 1
    state = RowState(9, torch.device("cpu"))
    state.seq_len.copy_(torch.randint(2, 100, (9,), generator=gen))
    state.bonus.copy_(torch.randint(0, 1000, (9,), generator=gen))
    state.offset.copy_(torch.randint(0, 50, (9,), generator=gen))
    state.reset_padding()
    n = state.seq_len[rows]
    emitted = torch.randint(0, 1000, (bs, ndt), generator=gen)
    ids = torch.cat([state.bonus[rows][:, None], emitted[:, :s].clone()], dim=1)  # drafts a strided view
    for b in range(bs):  # drafts matching the target's picks for 0..S leading positions
        k = int(torch.randint(0, s + 1, (1,), generator=gen))
        if k < s:
            ids[b, 1 + k] = emitted[b, k] + 1
    accept = torch.randint(1, ndt + 1, (bs,), generator=gen) if sampled else None
    feat = torch.randn(bs if hidden == "one" else bs * ndt, 24, generator=gen).to(torch.bfloat16) if hidden else None
    nxt = torch.randn(9, 24, generator=gen).to(torch.bfloat16) if hidden else None
    return rows, n, cm.Commit(emitted, ids[:, 1:], accept, feat, nxt), state


def run(fn, rows: torch.Tensor, n: torch.Tensor, res: cm.Commit, state: RowState) -> tuple[torch.Tensor, ...]:
    res = cm.Commit(res.emitted, res.drafts, res.accept, res.hidden,
                    res.next_hidden.clone() if res.next_hidden is not None else None)
    out = torch.full((rows.shape[0], res.emitted.shape[1] + 1), -7, dtype=torch.long, device=rows.device)
    acc = fn(out, rows, n, res, state)
    extra = (res.next_hidden,) if res.next_hidden is not None else ()
    return (acc.clone(), out, state.seq_len.clone(), state.bonus.clone(), state.offset.clone(), *extra)


@pytest.mark.parametrize("s", [0, 1, 5])
@pytest.mark.parametrize("sampled", [False, True])
@pytest.mark.parametrize("hidden", [False, True, "one"])
def test_commit_matches_the_torch_reference(s: int, sampled: bool, hidden: bool | str) -> None:
    rows, n, res, state = case(s, sampled, hidden, seed=10 * s + sampled + 2 * bool(hidden) + 4 * (hidden == "one"))
    twin = RowState(9, torch.device("cpu"))
    for name in ("seq_len", "bonus", "rng", "sampling"):
        getattr(twin, name).copy_(getattr(state, name))
    want = run(cm.commit_torch, rows, n, res, twin)
    got = run(cm.commit, rows, n, res, state)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w), (g, w)
    acc = got[0]
    if not sampled:
        assert torch.equal(acc, greedy_accept(res.drafts, res.emitted)[0])
        assert sorted(set(acc.tolist())) != [1] or s == 0, "the case accepts more than the bonus somewhere"
    real = rows != 0
    assert torch.equal(state.seq_len[rows[real]], n[real] + acc[real])
    if hidden == "one":  # the request's own row, whatever its accept length
        assert res.hidden is not None and torch.equal(got[-1][rows[real]], res.hidden[real])
    assert state.seq_len[0] == 1 and state.bonus[0] == 0 and state.offset[0] == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU tensors take the torch path where the interpreter is off; "
                    "test_commit_and_long_argmax_on_cuda runs the compiled kernel")
def test_commit_kernel_runs_under_the_interpreter(launches) -> None:  # noqa: ANN001
    """The test above compares the kernel, not the torch path twice: the launcher takes the kernel."""
    calls = launches(cm, "_commit_kernel")
    rows, n, res, state = case(2, False, True, seed=1)
    cm.commit(torch.zeros(rows.shape[0], 4, dtype=torch.long), rows, n, res, state)
    assert calls == [1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("sampled", [False, True])
def test_commit_and_long_argmax_on_cuda(sampled: bool) -> None:
    """The compiled kernels: ``commit`` against its torch reference on CUDA tensors, and
    ``argmax_rows`` over a target's vocabulary (128,256 values a row) against torch's argmax."""
    from updraft.spec.sampling_kernels import argmax_rows

    rows, n, res, state = case(5, sampled, True, seed=7)
    dev = torch.device("cuda")
    res = cm.Commit(*(t.to(dev) if t is not None else None for t in (res.emitted, res.drafts, res.accept, res.hidden,
                                                                     res.next_hidden)))
    rows, n = rows.to(dev), n.to(dev)
    twin = RowState(9, dev)
    gpu = RowState(9, dev)
    for name in ("seq_len", "bonus", "rng", "sampling"):
        getattr(twin, name).copy_(getattr(state, name))
        getattr(gpu, name).copy_(getattr(state, name))
    want = run(cm.commit_torch, rows, n, res, twin)
    got = run(cm.commit, rows, n, res, gpu)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w), (g, w)
    x = torch.randn(16, 128256, device=dev).to(torch.bfloat16).float()
    x[3, 100000] = x[3, 7] = x[3].max() + 1  # a tie across tiles
    assert torch.equal(argmax_rows(x), x.argmax(-1))


@pytest.mark.parametrize("s", [0, 3])
def test_commit_appends_the_emitted_tokens_to_the_histories(s: int) -> None:
    """With a token history (n-gram lookups), the kernel writes each request's emitted tokens at
    positions ``n .. n + S`` of its row, clamped to the history's width, as the torch reference
    does (row 0, where padded requests write over each other, is junk in both)."""
    rows, n, res, state = case(s, False, False, seed=40 + s)
    pad, cols = 4, 4 + 100
    n = n.clamp(max=98)  # one row's block runs past the width: clamped onto the last column
    n[0] = 98
    twin = RowState(9, torch.device("cpu"))
    for name in ("seq_len", "bonus", "rng", "sampling"):
        getattr(twin, name).copy_(getattr(state, name))
    hists = []
    for fn, st in ((cm.commit_torch, twin), (cm.commit, state)):
        history = DeviceNgram(9, cols - pad, 1, pad, torch.device("cpu"))
        history.hist.fill_(-1)
        out = torch.zeros(rows.shape[0], s + 2, dtype=torch.long)
        fn(out, rows, n, res, st, history)
        hists.append(history.hist)
    assert torch.equal(hists[0][1:], hists[1][1:])
    b = 2  # row 5
    assert hists[1][5, pad + int(n[b]) : pad + int(n[b]) + s + 1].tolist() == res.emitted[b].tolist()
    assert (hists[1][2] == -1).all(), "a row no request holds is untouched"

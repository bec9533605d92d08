"""The device n-gram matcher proposes exactly what the host ``NgramIndex`` proposes (random and
repetitive histories, stale tokens past each row's length, a batch of mixed lengths), with no host
sync or data-dependent shape (it runs on the meta device); histories are admitted incrementally
and rewritten whole for a row another request wrote last."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from updraft.engine.request import Request
from updraft.sampling_params import SamplingParams
from updraft.spec import ngram_device
from updraft.spec.ngram import NgramIndex
from updraft.spec.ngram_device import SENTINEL, DeviceNgram, match_drafts


def host_drafts(tokens: list[int], n_min: int, n_max: int, k: int) -> list[int]:
    idx = NgramIndex(n_min, n_max)
    idx.extend(tokens)
    return idx.propose(k)[0]


def device_drafts(seqs: list[list[int]], n_min: int, n_max: int, k: int, width: int, junk: random.Random) -> list[list[int]]:
    """One batched call; positions past each row's length hold junk that must not be read."""
    pad = n_max
    hist = torch.full((len(seqs), pad + width), SENTINEL, dtype=torch.int32)
    for b, s in enumerate(seqs):
        hist[b, pad : pad + len(s)] = torch.tensor(s, dtype=torch.int32)
        hist[b, pad + len(s) :] = torch.tensor([junk.randrange(0, 5) for _ in range(width - len(s))], dtype=torch.int32)
    lens = torch.tensor([len(s) for s in seqs])
    return match_drafts(hist, lens, n_min, n_max, k, pad).tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=40), min_size=1, max_size=4),
       st.integers(1, 3), st.integers(0, 2), st.integers(1, 6), st.integers(0, 2**16))
def test_matches_ngram_index(seqs: list[list[int]], n_min: int, extra: int, k: int, seed: int) -> None:
    n_max = n_min + extra
    got = device_drafts(seqs, n_min, n_max, k, 48, random.Random(seed))
    assert got == [host_drafts(s, n_min, n_max, k) for s in seqs]


@pytest.mark.parametrize("n_min,n_max", [(1, 4), (2, 3), (3, 3)])
def test_matches_ngram_index_on_repetitive_and_long_histories(n_min: int, n_max: int) -> None:
    rng = random.Random(n_min * 10 + n_max)
    seqs = []
    for _ in range(12):
        period = [rng.randrange(0, 50) for _ in range(rng.randrange(2, 9))]
        s = (period * 40)[: rng.randrange(1, 300)]
        for _ in range(rng.randrange(0, 4)):  # a few edits break the period
            s[rng.randrange(len(s))] = rng.randrange(0, 50)
        seqs.append(s)
    seqs += [[rng.randrange(0, 1000) for _ in range(rng.randrange(1, 300))] for _ in range(4)]
    seqs += [[7], [7, 7], [3, 4]]
    got = device_drafts(seqs, n_min, n_max, 5, 320, rng)
    assert got == [host_drafts(s, n_min, n_max, 5) for s in seqs]


def test_no_host_sync_and_static_shapes() -> None:
    """On the meta device a ``.item()``, a boolean mask index or a ``nonzero`` raises: the
    matcher and the append are graph-capturable as far as shapes and syncs go."""
    meta = torch.device("meta")
    ng = DeviceNgram(9, 64, 1, 4, meta)
    rows = torch.zeros(8, dtype=torch.long, device=meta)
    lens = torch.ones(8, dtype=torch.long, device=meta)
    drafts = ng.propose(rows, lens, 5)
    assert drafts.shape == (8, 5) and drafts.dtype == torch.int64
    ng.append(rows, lens, torch.zeros(8, 6, dtype=torch.long, device=meta))


def _req(rid: str, prompt: list[int], out: list[int], row: int) -> Request:
    r = Request(request_id=rid, prompt_ids=list(prompt), params=SamplingParams())
    r.output_ids = list(out)
    r.row = row
    return r


def test_admit_writes_what_the_device_lacks_and_append_extends() -> None:
    ng = DeviceNgram(4, 32, 1, 3, torch.device("cpu"))
    pad = ng.pad

    def row(r: int, n: int) -> list[int]:
        return ng.hist[r, pad : pad + n].tolist()

    a = _req("a", [1, 2, 3], [4], row=1)
    ng.admit([a])
    assert row(1, 4) == [1, 2, 3, 4] and ng.hist[1, :pad].tolist() == [SENTINEL] * pad
    # the graph appends an iteration's tokens (two accepted, one junk past the new length)
    ng.append(torch.tensor([1]), torch.tensor([4]), torch.tensor([[5, 6, 99]]))
    a.output_ids += [5, 6, 7]  # then a per-phase iteration the device did not see
    ng.hist[1, pad + 1] = 42  # a position admitted before: not rewritten for the same owner
    ng.admit([a])
    assert row(1, 7) == [1, 42, 3, 4, 5, 6, 7]
    # another request takes the row: rewritten whole
    b = _req("b", [9, 8], [7, 6], row=1)
    ng.admit([b])
    assert row(1, 4) == [9, 8, 7, 6]
    # a came back (re-admitted after preemption) into the row b wrote: rewritten whole
    a.row = 1
    ng.admit([a])
    assert row(1, 7) == [1, 2, 3, 4, 5, 6, 7]
    assert ng.propose(torch.tensor([1]), torch.tensor([7]), 2).tolist() == [host_drafts(a.all_ids, 1, 3, 2)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=40), min_size=1, max_size=4),
       st.integers(1, 3), st.integers(0, 2), st.integers(1, 6), st.integers(0, 4), st.integers(0, 2**16))
def test_lookup_kernel_matches_the_torch_matcher(seqs: list[list[int]], n_min: int, extra: int, k: int, min_match: int,
                                                 seed: int) -> None:
    """``DeviceNgram.lookup_into``'s kernel (the Triton interpreter here) writes ``match_drafts``'
    drafts into the verify block's columns 1..k exactly where the match is ``>= min_match`` long,
    and leaves the other rows' drafts as they were; rows live anywhere in the history table."""
    from updraft.spec.sampling_kernels import use_triton

    n_max = n_min + extra
    rng = random.Random(seed)
    ng = DeviceNgram(8, 48, n_min, n_max, torch.device("cpu"))
    rows = torch.tensor(rng.sample(range(1, 8), len(seqs)))
    for r, s in zip(rows.tolist(), seqs, strict=True):
        ng.hist[r, ng.pad : ng.pad + len(s)] = torch.tensor(s, dtype=torch.int32)
        ng.hist[r, ng.pad + len(s) :] = torch.tensor([rng.randrange(0, 5) for _ in range(48 - len(s))], dtype=torch.int32)
    lens = torch.tensor([len(s) for s in seqs])
    ids = torch.randint(100, 200, (len(seqs), k + 1))
    dist = (torch.rand(len(seqs), k, 6), torch.randint(0, 300, (len(seqs), k, 6)))
    drafts, match = match_drafts(ng.hist[rows], lens, n_min, n_max, k, ng.pad, with_match=True)
    want = ids.clone()
    take = match >= min_match
    want[take, 1:] = drafts[take]
    if not use_triton(ids):
        pytest.skip("the interpreter is off (a GPU machine): test_lookup_kernel_on_cuda runs the kernel there")
    ng.lookup_into(rows, lens, ids, min_match)
    assert torch.equal(ids, want)
    # the locks the greedy picks take (``locks``): the same drafts in the rows taken, -1 in the
    # others, from the kernel and from the torch path
    want_locks = torch.where(take[:, None], drafts, -1)
    assert torch.equal(ng.locks(rows, lens, k, min_match)[:, 1:], want_locks)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ngram_device, "use_triton", lambda t: False)
        assert torch.equal(ng.locks(rows, lens, k, min_match)[:, 1:], want_locks)
    # with the drafts' distributions (sampled): the kernel and the torch path write the same
    # one-hot q and candidates into the replaced rows and leave the others
    got_ids, got = ids.clone(), tuple(t.clone() for t in dist)
    ng.lookup_into(rows, lens, got_ids, min_match, got)
    ref_ids, ref = ids.clone(), tuple(t.clone() for t in dist)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ngram_device, "use_triton", lambda t: False)
        ng.lookup_into(rows, lens, ref_ids, min_match, ref)
    assert torch.equal(got_ids, ref_ids) and all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
    q1, c1 = ngram_device.one_hot_rows(drafts, 6)
    for b in range(len(seqs)):
        assert torch.equal(got[0][b], q1[b] if take[b] else dist[0][b])
        assert torch.equal(got[1][b], c1[b] if take[b] else dist[1][b])
    assert all(len(set(row.tolist())) == 6 and row[0] == d for row, d in zip(c1.flatten(0, 1), drafts.flatten(), strict=True))
    # the match lengths: the longest suffix (up to n_max) found earlier in the history, else 0
    for b, s in enumerate(seqs):
        longest = max((n for n in range(n_min, min(n_max, len(s) - 1) + 1)
                       if any(s[e - n + 1 : e + 1] == s[-n:] for e in range(n - 1, len(s) - 1))), default=0)
        assert int(match[b]) == longest, (s, n_min, n_max)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("min_match", [0, 3])
def test_lookup_kernel_on_cuda(min_match: int) -> None:
    """The compiled kernel against the torch matcher: repetitive and random histories of up to
    3,000 tokens (several of the kernel's blocks of candidate ends) in a 4,096-wide table."""
    rng = random.Random(min_match)
    ng = DeviceNgram(17, 4096, 1, 4, torch.device("cuda"))
    seqs = [((lambda p: (p * 600)[: rng.randrange(1, 3000)])([rng.randrange(0, 40) for _ in range(rng.randrange(2, 9))]))
            for _ in range(8)] + [[rng.randrange(0, 30000) for _ in range(rng.randrange(1, 3000))] for _ in range(8)]
    rows = torch.tensor(rng.sample(range(1, 17), len(seqs)), device="cuda")
    for r, s in zip(rows.tolist(), seqs, strict=True):
        ng.hist[r, ng.pad : ng.pad + len(s)] = torch.tensor(s, dtype=torch.int32)
    lens = torch.tensor([len(s) for s in seqs], device="cuda")
    ids = torch.randint(50000, 60000, (len(seqs), 6), device="cuda")
    drafts, match = match_drafts(ng.hist[rows], lens, 1, 4, 5, ng.pad, with_match=True)
    want = ids.clone()
    want[match >= min_match, 1:] = drafts[match >= min_match]
    dist = (torch.rand(len(seqs), 5, 64, device="cuda"), torch.randint(0, 30000, (len(seqs), 5, 64), device="cuda"))
    keep = tuple(t.clone() for t in dist)
    ng.lookup_into(rows, lens, ids, min_match, dist)
    assert torch.equal(ids, want)
    assert torch.equal(ng.locks(rows, lens, 5, min_match)[:, 1:],
                       torch.where((match >= min_match)[:, None], drafts, -1))
    assert all(h == host_drafts(s, 1, 4, 5) for h, s in zip(drafts.tolist(), seqs, strict=True))
    q1, c1 = ngram_device.one_hot_rows(drafts, 64)  # sampled: the replaced rows' q one-hot at their drafts
    take = (match >= min_match)[:, None, None]
    assert torch.equal(dist[0], torch.where(take, q1, keep[0])) and torch.equal(dist[1], torch.where(take, c1, keep[1]))

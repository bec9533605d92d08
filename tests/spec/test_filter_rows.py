"""``rejection_kernels.filter_rows`` (one program per verify row) and ``filter_hist`` (bf16 rows
with a top-k / top-p cut-off, from a histogram) against the float64 sort-based reference of the
sampler's filters (``updraft.testing.sampler_filter_reference``) and ``Sampler.probs``: the same
kept sets (ties included) and probabilities. Rows whose result hinges on rounding (a cumulative
mass within 1e-5 of ``top_p``, a logit within rounding of the min-p cut-off) are counted, not
compared. Without CUDA the kernels run under the Triton interpreter (tests/conftest.py)."""

from __future__ import annotations

import math

import pytest
import torch

from updraft.runtime.sampler import GREEDY_TEMPERATURE, Sampler, SamplingBatch
from updraft.spec import rejection_kernels as rk
from updraft.testing import filter_test_params, filter_test_rows, sampler_filter_reference

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rk, "INTERPRET", True)


def kernel_keep(logits: torch.Tensor, temp: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    """[R, V] bool: the finite tokens ``stats`` keep (every token of a bad row, the argmax of a
    greedy one)."""
    lg = logits.float().cpu()
    st = stats.cpu()
    keep = torch.isfinite(lg) & (lg >= st[:, rk.THR, None])
    keep |= st[:, rk.BAD, None] > 0
    greedy = temp.cpu() < GREEDY_TEMPERATURE
    one_hot = torch.zeros_like(keep).scatter_(1, st[:, rk.AMAX].long()[:, None], True)
    return torch.where(greedy[:, None], one_hot, keep)


def _check_filter(logits: torch.Tensor, temp: torch.Tensor, top_k: torch.Tensor,
                  top_p: torch.Tensor, min_p: torch.Tensor, bf16_values: bool = False) -> int:
    """Kept sets equal on every robust row, probabilities close; returns the fragile count.
    ``bf16_values``: the logits are rounded to bf16 values first and take ``filter_hist``."""
    if bf16_values:
        logits = logits.to(torch.bfloat16).float()
    stats = rk.filter_rows(logits.to(DEV), 1, temp.to(DEV), top_k.to(DEV), top_p.to(DEV),
                           min_p.to(DEV), bf16_values=bf16_values)
    keep, probs, fragile = sampler_filter_reference(logits, temp, top_k, top_p, min_p)
    got = kernel_keep(logits, temp, stats)
    robust = ~fragile
    bad_rows = [r for r in range(len(temp)) if robust[r] and not torch.equal(got[r], keep[r])]
    assert not bad_rows, [(r, float(temp[r]), int(top_k[r]), float(top_p[r]), float(min_p[r]),
                           int(got[r].sum()), int(keep[r].sum())) for r in bad_rows]
    p = rk.probs_from_stats(logits.to(DEV), 1, temp.to(DEV), stats).cpu().double()
    torch.testing.assert_close(p[robust], probs[robust], atol=2e-6, rtol=1e-4)
    sb = SamplingBatch.on_device(temp, top_k, top_p, min_p, logits.shape[1])
    sampler = Sampler().probs(logits, sb).double()
    assert torch.equal(sampler[robust] > 0, probs[robust] > 0)
    torch.testing.assert_close(p[robust], sampler[robust], atol=2e-6, rtol=1e-4)
    return int(fragile.sum())


@pytest.mark.parametrize("vocab", [300, 777, 4099, 5000])
@pytest.mark.parametrize("kind", ["randn", "ties", "coarse", "masked", "peaked", "flat"])
def test_filter_matches_float64_sort(vocab: int, kind: str) -> None:
    g = torch.Generator().manual_seed(vocab * 31 + len(kind))
    rows = 6
    logits = filter_test_rows(kind, rows, vocab, g)
    fragile = _check_filter(logits, *filter_test_params(rows, vocab, g))
    assert fragile <= 2, f"{fragile} of {rows} rows hinge on rounding"


@pytest.mark.parametrize("vocab", [777])
@pytest.mark.parametrize("kind", ["randn", "ties", "coarse", "masked", "peaked", "flat"])
def test_filter_of_bf16_values_matches_float64_sort(vocab: int, kind: str) -> None:
    """The histogram filter (``filter_hist``) on bf16-valued rows: the same kept sets."""
    g = torch.Generator().manual_seed(vocab * 31 + len(kind))
    rows = 6
    logits = filter_test_rows(kind, rows, vocab, g)
    fragile = _check_filter(logits, *filter_test_params(rows, vocab, g), bf16_values=True)
    assert fragile <= 2, f"{fragile} of {rows} rows hinge on rounding"


def test_filter_of_bf16_values_at_the_real_vocabulary_and_zeros() -> None:
    """SmolLM2's vocabulary through the histogram filter; -0.0 and +0.0 are one tie group."""
    g = torch.Generator().manual_seed(491)
    logits = torch.randn(4, 49152, generator=g) * torch.tensor([[4.0], [3.0], [0.3], [2.0]])
    logits[:, :100] = 0.0
    logits[:, 100:200] = -0.0
    temp = torch.tensor([0.7, 1.0, 1.3, 0.7])
    assert _check_filter(logits, temp, torch.tensor([-1, 50, -1, 20]), torch.tensor([0.9, 1.0, 0.9, 0.8]),
                         torch.tensor([0.0, 0.0, 0.0, 0.05]), bf16_values=True) <= 1
    lg = torch.zeros(1, 300)
    lg[0, 150:] = -0.0
    lg[0, 7] = 1.0
    stats = rk.filter_rows(lg.to(DEV), 1, torch.ones(1, device=DEV), torch.tensor([2], device=DEV),
                           torch.ones(1, device=DEV), torch.zeros(1, device=DEV), bf16_values=True)
    assert kernel_keep(lg, torch.ones(1), stats).sum().item() == 300, "top-k 2 keeps the whole group of zeros"


def test_filter_at_the_real_vocabulary() -> None:
    # SmolLM2's vocabulary (12 blocks) with the benchmark's T 0.7 / top-p 0.9, top-k 50 and a
    # flat row whose nucleus needs several probes (its cumulative mass moves by ~2e-5 per
    # token near top-p, so it may hinge on rounding).
    g = torch.Generator().manual_seed(49152)
    logits = torch.randn(4, 49152, generator=g) * torch.tensor([[4.0], [3.0], [0.3], [2.0]])
    temp = torch.tensor([0.7, 1.0, 1.3, 0.7])
    assert _check_filter(logits, temp, torch.tensor([-1, 50, -1, 20]),
                         torch.tensor([0.9, 1.0, 0.9, 0.8]), torch.tensor([0.0, 0.0, 0.0, 0.05])) <= 1


def test_hist_counts_only_the_tokens_a_cut_off_can_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    """LM-like rows at SmolLM2's vocabulary (a few tokens far above a broad bulk). Under top-p
    alone the histogram counts only the tokens near the max, their left-out mass still in Z; under
    top-k only those at or above the floor its group maxima give (``topk_floor``). Kept sets and
    probabilities equal the reference. A top_p above TAIL_P_MAX, a flat row and a top-k larger
    than the row's 768 groups count every finite token. The bins start as garbage (the first
    launch zeroes them, no memset)."""
    from updraft.spec import filter_hist

    empty = torch.empty

    def poisoned(*shape: object, dtype: torch.dtype | None = None, **kw: object) -> torch.Tensor:
        t = empty(*shape, dtype=dtype, **kw)  # type: ignore[call-overload]
        return t.fill_(7) if dtype == torch.int32 else t

    monkeypatch.setattr(filter_hist.torch, "empty", poisoned)

    g = torch.Generator().manual_seed(2026)
    vocab = 49152
    logits = torch.randn(8, vocab, generator=g) * 2.0
    logits[:, 100:120] += torch.linspace(6.0, 16.0, 20)
    logits[6] = torch.randn(vocab, generator=g) * 0.3  # flat: every token within D of the max
    logits = logits.to(torch.bfloat16).float()
    temp = torch.tensor([0.7, 0.7, 1.0, 0.7, 1.0, 0.7, 0.7, 1.0])
    top_k = torch.tensor([-1, -1, -1, 50, 600, -1, -1, 1000])
    top_p = torch.tensor([0.9, 0.95, 0.8, 0.9, 1.0, 0.9995, 0.9, 1.0])
    min_p = torch.tensor([0.0, 0.02, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert _check_filter(logits, temp, top_k, top_p, min_p, bf16_values=True) <= 1
    h = filter_hist.histogram(logits.to(DEV), 1, temp.to(DEV), top_k.to(DEV), top_p.to(DEV), GREEDY_TEMPERATURE)
    counted = h.hist.sum(1).tolist()
    assert all(n < vocab // 20 for n in counted[:4]) and 600 <= counted[4] < vocab // 2, counted
    assert counted[5:] == [vocab] * 3, counted
    assert (h.tail[:5] > 0).all() and not h.tail[5:].any()


@pytest.mark.parametrize("bf16_values", [False, True], ids=["row", "hist"])
def test_filter_keeps_ties_at_every_cut_off(bf16_values: bool) -> None:
    base = torch.tensor([5.0, 4.0, 3.0, 3.0, 3.0, 3.0, 2.0, 1.0] + [0.0] * 12)
    lg = base.expand(6, -1).contiguous()
    # top-k 3 / 4: the k-th largest is a 3, all four 3s stay; min-p 1: only the max; top-p 0.8
    # crosses inside the group of 3s (mass before the 4th 3: 0.797) and keeps the group, 0.955
    # stops at the 1 (before it 0.952, after 0.961); an all-tied row keeps everything.
    lg[5] = 1.0
    temp = torch.ones(6)
    top_k = torch.tensor([3, 4, -1, -1, -1, 2])
    top_p = torch.tensor([1.0, 1.0, 1.0, 0.8, 0.955, 0.5])
    min_p = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    stats = rk.filter_rows(lg.to(DEV), 1, temp.to(DEV), top_k.to(DEV), top_p.to(DEV), min_p.to(DEV),
                           bf16_values=bf16_values)
    got = kernel_keep(lg, temp, stats).sum(-1).tolist()
    want = sampler_filter_reference(lg, temp, top_k, top_p, min_p)[0].sum(-1).tolist()
    assert got == want == [6, 6, 1, 6, 8, 20], (got, want)


@pytest.mark.parametrize("bf16_values", [False, True], ids=["row", "hist"])
def test_filter_top_p_boundary_is_strict(bf16_values: bool) -> None:
    """The sampler keeps a sorted position iff the mass before it is < top_p. With T = log2(e)
    the kernel's weights are exact powers of two (1, 1/2, 1/4, ..., 1/32 twice: total 2), so the
    mass before the third token is exactly 0.75 of the total: top-p 0.75 keeps two tokens, a
    hair above keeps three."""
    lg = torch.tensor([[0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -5.0]]).expand(2, -1).contiguous()
    temp = torch.full((2,), math.log2(math.e))
    top_p = torch.tensor([0.75, 0.7500001])
    stats = rk.filter_rows(lg.to(DEV), 1, temp.to(DEV), torch.full((2,), -1, device=DEV), top_p.to(DEV),
                           torch.zeros(2, device=DEV), bf16_values=bf16_values)
    assert kernel_keep(lg, temp, stats).sum(-1).tolist() == [2, 3]


@pytest.mark.parametrize("bf16_values", [False, True], ids=["row", "hist"])
def test_filter_bad_and_greedy_rows(bf16_values: bool) -> None:
    lg = torch.randn(6, 300, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).float()
    lg[0, 7] = math.nan
    lg[1, 9] = math.inf
    lg[2] = -math.inf
    lg[3, 5] = lg[3, 11] = 50.0  # greedy: the first of two equal maxima
    temp = torch.tensor([0.7, 1.0, 0.9, 0.0, 1e-6, 0.7])
    top_k = torch.tensor([5, -1, 3, 5, -1, -1])
    top_p = torch.tensor([0.5, 0.9, 1.0, 0.5, 0.9, 0.9])
    stats = rk.filter_rows(lg.to(DEV), 1, temp.to(DEV), top_k.to(DEV), top_p.to(DEV),
                           torch.zeros(6, device=DEV), bf16_values=bf16_values).cpu()
    assert stats[:3, rk.BAD].tolist() == [1.0, 1.0, 1.0] and not stats[3:, rk.BAD].any()
    p = rk.probs_from_stats(lg.to(DEV), 1, temp.to(DEV), stats.to(DEV)).cpu()
    torch.testing.assert_close(p[:3], torch.full((3, 300), 1 / 300))  # uniform, as the sampler
    assert int(stats[3, rk.AMAX]) == 5 and float(p[3, 5]) == 1.0
    assert int(stats[4, rk.AMAX]) == int(lg[4].argmax()) and float(p[4].max()) == 1.0
    sb = SamplingBatch.on_device(temp, top_k, top_p, torch.zeros(6), 300)
    torch.testing.assert_close(p, Sampler().probs(lg, sb), atol=2e-6, rtol=1e-4)


def test_cut_in_the_filter_launch_equals_its_own_launch(monkeypatch: pytest.MonkeyPatch, launches) -> None:  # noqa: ANN001
    """``CUT_IN_FILTER``: the histogram's cut-offs run in the filter's launch beside its own rows
    (greedy, temperature or min-p only, bad) give the statistics of ``filter_hist._cut_kernel``'s
    launch bit for bit, over every kind of row in one call; a launch fewer."""
    from updraft.spec import filter_hist

    g = torch.Generator().manual_seed(77)
    rows, vocab = 8, 777
    logits = filter_test_rows("randn", rows, vocab, g).to(torch.bfloat16).float()
    logits[1, 3] = math.nan  # bad, with a cut-off
    temp = torch.tensor([0.7, 0.7, 0.0, 1.0, 0.7, 1.3, 0.7, 0.9])
    top_k = torch.tensor([-1, 5, 5, 20, -1, -1, 0, 300])
    top_p = torch.tensor([0.9, 0.9, 0.5, 1.0, 1.0, 0.8, 1.0, 0.95])
    min_p = torch.tensor([0.0, 0.0, 0.0, 0.1, 0.05, 0.0, 0.0, 0.02])
    args = [t.to(DEV) for t in (logits, temp, top_k, top_p, min_p)]
    calls = launches(filter_hist, "_cut_kernel")
    fused = rk.filter_rows(args[0], 1, *args[1:], bf16_values=True).cpu()
    assert calls == []
    monkeypatch.setattr(rk, "CUT_IN_FILTER", False)
    apart = rk.filter_rows(args[0], 1, *args[1:], bf16_values=True).cpu()
    assert calls == [1]
    assert torch.equal(fused, apart)
    assert _check_filter(logits, temp, top_k, top_p, min_p, bf16_values=True) <= 1

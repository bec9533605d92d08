"""Acceptance rules: greedy matching and lossless rejection sampling (chi-square)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from updraft.runtime.sampler import Sampler, SamplingBatch
from updraft.sampling_params import SamplingParams
from updraft.spec.verify import greedy_accept, rejection_accept


def test_greedy_accept_counts_leading_matches() -> None:
    drafts = torch.tensor([[5, 6, 7], [5, 9, 7], [1, 2, 3]])
    target = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8], [4, 2, 3, 0]])
    acc, em = greedy_accept(drafts, target)
    assert acc.tolist() == [4, 2, 1]  # counts the bonus / correction token
    assert em[1, :2].tolist() == [5, 6]  # accepted draft, then the target's correction
    assert em[2, :1].tolist() == [4]


def chi_p(obs: np.ndarray, probs: torch.Tensor | np.ndarray) -> float:
    """p-value of observed counts against a distribution (float64, renormalised)."""
    pr = np.asarray(probs, dtype=np.float64)
    pr = pr / pr.sum()
    return float(chisquare(obs, pr * obs.sum()).pvalue)


def _probs(v: int, rows: int, gen: torch.Generator) -> torch.Tensor:
    logits = torch.randn(rows, v, generator=gen) * 1.5
    return torch.softmax(logits, -1)


@pytest.mark.parametrize("draft_kind", ["sampled", "deterministic"])
def test_rejection_sampling_is_lossless(draft_kind: str) -> None:
    """Target distributions fixed per position (independent of the prefix): the first emitted
    token must follow p_0, and the token after an accepted first draft must follow p_1.
    With N = 40000 rows a 0.02 error in any probability is caught (see the power test below)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    v, s, n = 6, 3, 40000
    p = _probs(v, s + 1, gen)  # [S+1, V]
    q = _probs(v, s, gen)
    p_b = p.expand(n, s + 1, v).contiguous()
    if draft_kind == "sampled":
        q_b = q.expand(n, s, v).contiguous()
        drafts = torch.stack([torch.multinomial(q[k], n, replacement=True) for k in range(s)], dim=1)
    else:
        q_b = None
        drafts = torch.tensor([[2, 4, 1]]).expand(n, s).contiguous()
    acc, em = rejection_accept(drafts, q_b, p_b, [None] * n)
    assert int(acc.min()) >= 1 and int(acc.max()) <= s + 1
    first = em[:, 0].numpy()
    obs = np.bincount(first, minlength=v)
    assert chi_p(obs, p[0].numpy()) > 1e-4
    ok = acc.numpy() >= 2
    second = em[ok, 1].numpy()
    obs2 = np.bincount(second, minlength=v)
    assert chi_p(obs2, p[1].numpy()) > 1e-4


def test_rejection_sampling_catches_a_biased_rule() -> None:
    """The test above has power: a rule that resamples from p (instead of the residual
    max(p - q, 0)) after a rejection is biased, and the same chi-square rejects it."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    v, n = 6, 40000
    p = _probs(v, 2, gen)
    q = _probs(v, 1, gen)
    drafts = torch.multinomial(q[0], n, replacement=True)[:, None]
    u = torch.rand(n)
    accept = u * q[0][drafts[:, 0]] <= p[0][drafts[:, 0]]
    wrong = torch.where(accept, drafts[:, 0], torch.multinomial(p[0], n, replacement=True))  # biased
    obs = np.bincount(wrong.numpy(), minlength=v)
    assert chi_p(obs, p[0].numpy()) < 1e-6


def test_rejection_with_top_p_uses_the_samplers_distribution() -> None:
    """With top-p, p is the filtered distribution the target sampler would use; tokens outside
    the nucleus are never emitted and the kept ones follow the renormalised distribution."""
    torch.manual_seed(3)
    v, n = 8, 30000
    logits = torch.randn(2, v) * 0.7
    params = SamplingParams(temperature=0.8, top_p=0.7)
    sb = SamplingBatch.build([params] * 2, [None, None], v, torch.device("cpu"))
    p = Sampler().probs(logits, sb)  # [2, V]
    drafts = torch.randint(0, v, (n, 1))
    acc, em = rejection_accept(drafts, None, p.expand(n, 2, v).contiguous(), [None] * n)
    first = em[:, 0].numpy()
    support = (p[0] > 0).numpy()
    assert not np.isin(first, np.where(~support)[0]).any()
    obs = np.bincount(first, minlength=v)[support]
    assert support.sum() >= 3
    assert chi_p(obs, p[0].numpy()[support]) > 1e-4


def test_no_drafts_samples_the_target() -> None:
    """S = 0 (a plain step on the per-phase path): one emitted token per row, drawn from p_0."""
    gen = torch.Generator().manual_seed(11)
    p = _probs(6, 1, gen)
    n = 20000
    acc, em = rejection_accept(torch.empty(n, 0, dtype=torch.long), None, p.expand(n, 1, 6).contiguous(), [gen] * n)
    assert acc.tolist() == [1] * n and em.shape == (n, 1)
    obs = np.bincount(em[:, 0].numpy(), minlength=6)
    assert chi_p(obs, p[0].numpy()) > 1e-4


def test_seeded_rows_are_reproducible() -> None:
    gen = torch.Generator().manual_seed(5)
    p = _probs(5, 3, gen).expand(4, 3, 5).contiguous()
    drafts = torch.tensor([[1, 2]] * 4)
    runs = []
    for _ in range(2):
        gens = [torch.Generator().manual_seed(i) for i in range(4)]
        runs.append(rejection_accept(drafts, None, p, gens))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_sample_size_detects_a_two_point_error() -> None:
    """Power check for the sizes above: moving 0.02 of probability mass between two tokens is
    rejected at p < 1e-4 with 40000 samples (the tests above accept at p > 1e-4)."""
    gen = torch.Generator().manual_seed(1)
    p = _probs(6, 1, gen)[0].double()
    bad = p.clone()
    hi, lo = int(p.argmax()), int(p.argmin())
    bad[hi] -= 0.02
    bad[lo] += 0.02
    torch.manual_seed(7)
    obs = np.bincount(torch.multinomial(bad.float(), 40000, replacement=True).numpy(), minlength=6)
    assert chi_p(obs, p.numpy()) < 1e-4

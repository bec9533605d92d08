"""Sampling as the fused graph does it: counter-based noise (``device_rng``), parameters already
on the device (``SamplingBatch.on_device``), lossless rejection sampling (chi-square)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from updraft.runtime.sampler import Sampler, SamplingBatch
from updraft.sampling_params import SamplingParams
from updraft.spec import device_rng
from updraft.spec.verify import rejection_accept


def chi_p(obs: np.ndarray, probs: np.ndarray) -> float:
    pr = np.asarray(probs, dtype=np.float64)
    pr = pr / pr.sum()
    return float(chisquare(obs, pr * obs.sum()).pvalue)


def test_uniforms_are_uniform_and_keyed() -> None:
    seed = torch.arange(4)
    off = torch.zeros(4, dtype=torch.long)
    u = device_rng.uniform(seed, off, 3, 100_000)
    assert float(u.min()) > 0 and float(u.max()) < 1
    for row in u.numpy():
        assert chi_p(np.histogram(row, bins=50, range=(0, 1))[0], np.ones(50)) > 1e-4
    # Same key, same numbers; another offset or stream, other numbers.
    assert torch.equal(u, device_rng.uniform(seed, off, 3, 100_000))
    assert not torch.equal(u, device_rng.uniform(seed, off + 1, 3, 100_000))
    assert not torch.equal(u, device_rng.uniform(seed, off, 4, 100_000))


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.7, top_p=0.9),
        SamplingParams(temperature=1.3, top_k=5, min_p=0.05),
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.9, top_k=3, top_p=0.5, min_p=0.2),
    ],
)
def test_on_device_batch_is_the_same_distribution(params: SamplingParams) -> None:
    v = 40
    logits = torch.randn(3, v, generator=torch.Generator().manual_seed(0)) * 2
    sampler = Sampler()
    host = sampler.probs(logits, SamplingBatch.build([params] * 3, [None] * 3, v, "cpu"))
    n = torch.ones(3)
    dev = SamplingBatch.on_device(n * params.temperature, (n * params.top_k).long(), n * params.top_p, n * params.min_p, v)
    torch.testing.assert_close(sampler.probs(logits, dev), host, rtol=1e-6, atol=1e-7)


def test_inverse_cdf_follows_the_weights() -> None:
    n, v = 40000, 7
    w = torch.tensor([0.5, 0.0, 2.0, 1.0, 0.0, 0.25, 3.0])  # unnormalised, with zeros
    u = device_rng.uniform(torch.arange(n), torch.zeros(n, dtype=torch.long), 5, 1)[:, 0]
    idx = device_rng.inverse_cdf(w.expand(n, v), u)
    obs = np.bincount(idx.numpy(), minlength=v)
    assert obs[1] == 0 and obs[4] == 0
    keep = w.numpy() > 0
    assert chi_p(obs[keep], w.numpy()[keep]) > 1e-4


def test_graphed_rejection_sampling_is_lossless() -> None:
    """Drafts drawn with counter uniforms by inverse CDF, acceptance and the correction token
    likewise (as the fused graph does): the first emitted token follows p_0 and the one after
    an accepted first draft p_1."""
    gen = torch.Generator().manual_seed(1)
    v, s, n = 6, 3, 40000
    p = torch.softmax(torch.randn(s + 1, v, generator=gen) * 1.5, -1)
    q = torch.softmax(torch.randn(s, v, generator=gen) * 1.5, -1)
    seed = torch.arange(n) * 7919
    off = torch.full((n,), 3, dtype=torch.long)

    def u1(stream: int) -> torch.Tensor:
        return device_rng.uniform(seed, off, stream, 1)[:, 0]

    drafts = torch.stack([device_rng.inverse_cdf(q[k].expand(n, v), u1(k)) for k in range(s)], dim=1)
    acc, em = rejection_accept(
        drafts, q.expand(n, s, v).contiguous(), p.expand(n, s + 1, v).contiguous(), [],
        device_rng.uniform(seed, off, 1000, s), u1(1001),
    )
    assert chi_p(np.bincount(em[:, 0].numpy(), minlength=v), p[0].numpy()) > 1e-4
    ok = acc.numpy() >= 2
    assert chi_p(np.bincount(em[ok, 1].numpy(), minlength=v), p[1].numpy()) > 1e-4
    # The same test has power: a rule that draws the correction from p instead of the residual fails.
    bad = device_rng.inverse_cdf(p[0].expand(n, v), u1(1001))
    first = torch.where(acc >= 2, drafts[:, 0], bad)
    assert chi_p(np.bincount(first.numpy(), minlength=v), p[0].numpy()) < 1e-6

"""Sampler: filters and penalties against per-row references, seeding, statistics, bad rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from updraft.runtime.sampler import Sampler, SamplingBatch
from updraft.sampling_params import SamplingParams

V = 64
sampler = Sampler()


def batch(
    params: list[SamplingParams],
    history: list[tuple[list[int], list[int]]] | None = None,
    vocab: int = V,
) -> SamplingBatch:
    """A batch whose rows with a seed get a fresh generator seeded with it."""
    gens = [None if p.seed is None else torch.Generator().manual_seed(p.seed) for p in params]
    return SamplingBatch.build(params, gens, vocab, "cpu", history)


def ref_probs(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """Straightforward float64 reference of one row's distribution (no penalties)."""
    if p.temperature == 0:
        return np.eye(len(logits))[np.argmax(logits)]
    x = logits.astype(np.float64) / p.temperature

    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max())
        return e / e.sum()

    if 0 < p.top_k < len(x):
        x = np.where(x < np.sort(x)[::-1][p.top_k - 1], -np.inf, x)
    if p.top_p < 1:
        probs, order = softmax(x), np.argsort(-x)
        mass, cutoff = 0.0, x[order[0]]
        for i in order:  # keep the most likely tokens until their mass reaches top_p
            if mass >= p.top_p:
                break
            mass, cutoff = mass + probs[i], x[i]
        x = np.where(x < cutoff, -np.inf, x)
    if p.min_p > 0:
        probs = softmax(x)
        x = np.where(probs < p.min_p * probs.max(), -np.inf, x)
    return softmax(x)


def ref_penalties(logits: np.ndarray, p: SamplingParams, prompt: list[int], out: list[int]):
    x = logits.astype(np.float64).copy()
    for t in set(prompt) | set(out):
        r = p.repetition_penalty
        x[t] = x[t] / r if x[t] > 0 else x[t] * r
    for t in set(out):
        x[t] -= p.frequency_penalty * out.count(t) + p.presence_penalty
    return x


FILTER_CASES = [
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.3),
    SamplingParams(temperature=2.5),
    SamplingParams(top_k=1),
    SamplingParams(top_k=7),
    SamplingParams(top_k=0),  # disabled
    SamplingParams(top_k=-1),  # disabled
    SamplingParams(top_k=V + 5),  # >= vocab: disabled
    SamplingParams(top_p=0.05),
    SamplingParams(top_p=0.5),
    SamplingParams(top_p=0.95),
    SamplingParams(min_p=0.05),
    SamplingParams(min_p=0.3),
    SamplingParams(min_p=1.0),  # only the most likely token
    SamplingParams(temperature=0.7, top_k=10, top_p=0.8),
    SamplingParams(temperature=1.3, top_k=20, top_p=0.9, min_p=0.02),
    SamplingParams(temperature=0.5, top_p=0.9, min_p=0.1),
]


def short(p: SamplingParams) -> str:
    """Test id naming only the fields that differ from the defaults."""
    default = SamplingParams()
    return ",".join(f"{k}={v}" for k, v in vars(p).items() if getattr(default, k) != v) or "default"


@pytest.mark.parametrize("p", FILTER_CASES, ids=short)
def test_each_filter_matches_reference(p: SamplingParams) -> None:
    logits = torch.randn(8, V, generator=torch.Generator().manual_seed(0)) * 3
    got = sampler.probs(logits, batch([p] * 8))
    want = np.stack([ref_probs(row, p) for row in logits.numpy()])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-6, rtol=1e-4)


def test_mixed_batch_rows_are_independent() -> None:
    logits = torch.randn(len(FILTER_CASES), V, generator=torch.Generator().manual_seed(1)) * 3
    got = sampler.probs(logits, batch(FILTER_CASES))
    want = np.stack([ref_probs(r, p) for r, p in zip(logits.numpy(), FILTER_CASES, strict=True)])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-6, rtol=1e-4)


def test_ties_at_the_cutoff_are_kept() -> None:
    logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, 1.0, 0.0]])
    probs = sampler.probs(logits, batch([SamplingParams(top_k=2)], vocab=6))
    assert (probs[0] > 0).tolist() == [True, True, True, True, False, False]


def test_penalties_match_reference() -> None:
    rng = np.random.default_rng(0)
    params = [
        SamplingParams(repetition_penalty=1.5),
        SamplingParams(repetition_penalty=0.7, frequency_penalty=0.5),
        SamplingParams(frequency_penalty=-1.0, presence_penalty=1.5),
        SamplingParams(),  # no penalties in a penalised batch
        SamplingParams(repetition_penalty=1.2, frequency_penalty=0.3, presence_penalty=-0.4),
    ]
    history = [(rng.integers(0, V, 10).tolist(), rng.integers(0, V, 15).tolist()) for _ in params]
    history[1] = ([], [])  # nothing seen: nothing changes
    history[2] = ([1, 2, 3, 1000, -1], [3, 3, 3, 4])  # out-of-vocab ids are ignored
    logits = torch.randn(len(params), V, generator=torch.Generator().manual_seed(2)) * 3
    sb = batch(params, history)
    got = sampler.apply_penalties(logits, sb).numpy()
    for r, (p, (prompt, out)) in enumerate(zip(params, history, strict=True)):
        prompt = [t for t in prompt if 0 <= t < V]
        want = ref_penalties(
            logits[r].numpy(), p if p.uses_penalties else SamplingParams(), prompt, out
        )
        np.testing.assert_allclose(got[r], want, rtol=1e-5, atol=1e-5)
    # Greedy rows pick the argmax of the penalised logits.
    greedy = [
        SamplingParams(
            temperature=0.0,
            repetition_penalty=p.repetition_penalty,
            frequency_penalty=p.frequency_penalty,
            presence_penalty=p.presence_penalty,
        )
        for p in params
    ]
    tokens = sampler.sample(logits, batch(greedy, history)).tokens
    assert tokens.tolist() == np.argmax(got, axis=1).tolist()


def test_penalties_need_history() -> None:
    with pytest.raises(ValueError):
        batch([SamplingParams(presence_penalty=1.0)])


def test_record_output_equals_rebuilding_with_longer_history() -> None:
    p = SamplingParams(frequency_penalty=0.5, presence_penalty=0.5, repetition_penalty=1.3)
    logits = torch.randn(2, V)
    sb = batch([p, p], [([1, 2], [3]), ([4], [])])
    sb.record_output(torch.tensor([3, 5]))
    sb.record_output(torch.tensor([7, -1]), valid=torch.tensor([True, False]))
    rebuilt = batch([p, p], [([1, 2], [3, 3, 7]), ([4], [5])])
    torch.testing.assert_close(
        sampler.apply_penalties(logits, sb), sampler.apply_penalties(logits, rebuilt)
    )


def test_greedy_is_argmax() -> None:
    logits = torch.randn(16, V)
    out = sampler.sample(logits, batch([SamplingParams(temperature=0.0)] * 16))
    assert torch.equal(out.tokens, logits.argmax(-1)) and out.logprobs is None
    assert not out.bad_rows.any()
    # Greedy rows in a batch with random rows, and tiny temperatures, are still argmax.
    params = [
        SamplingParams(temperature=0.0 if r % 2 else 1e-7 if r % 4 else 0.9) for r in range(16)
    ]
    out = sampler.sample(logits, batch(params))
    greedy = torch.tensor([p.temperature < 1e-5 for p in params])
    assert torch.equal(out.tokens[greedy], logits.argmax(-1)[greedy])


def seeded_run(params: list[SamplingParams], logits: torch.Tensor, steps: int) -> list[list[int]]:
    sb = batch(params)  # fresh generators: same seeds, same starting state
    return [sampler.sample(logits, sb).tokens.tolist() for _ in range(steps)]


def test_seeded_rows_reproducible_whatever_the_batch() -> None:
    target = SamplingParams(temperature=1.0, top_p=0.9, seed=1234)
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(3))
    alone = [row[0] for row in seeded_run([target], logits, 5)]
    others = [
        SamplingParams(temperature=0.8),
        SamplingParams(seed=7),
        SamplingParams(temperature=0),
    ]
    mixed = seeded_run(others + [target], logits.expand(4, V), 5)
    reordered = seeded_run([target] + others[::-1], logits.expand(4, V), 5)
    assert [row[3] for row in mixed] == alone == [row[0] for row in reordered]
    assert len(set(alone)) > 1  # the draws do advance the generator
    assert seeded_run([SamplingParams(seed=99)], logits, 5) != seeded_run([target], logits, 5)


def chi_square_p(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    support = probs > 0
    assert counts[~support].sum() == 0, "sampled a token with zero probability"
    expected = probs[support].double()
    expected = expected / expected.sum() * len(tokens)  # float64: chisquare checks the sums
    return stats.chisquare(counts[support].numpy(), expected.numpy()).pvalue


@pytest.mark.parametrize("seeded", [False, True])
def test_sample_draws_from_probs(seeded: bool) -> None:
    """The empirical distribution of ``sample`` is ``probs`` (all filters on, small vocab)."""
    torch.manual_seed(0)
    vocab, n = 12, 20000 if not seeded else 3000
    p = SamplingParams(temperature=0.8, top_k=9, top_p=0.93, min_p=0.03)
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(4)) * 1.5
    one = batch([p], vocab=vocab)
    probs = sampler.probs(logits, one)[0]
    assert 2 < (probs > 0).sum() < 9  # every filter cut something
    if seeded:
        params = [SamplingParams(**{**vars(p), "seed": s}) for s in range(n)]
        many = batch(params, vocab=vocab)
    else:
        many = one.repeat_rows([n])
    tokens = sampler.sample(logits.expand(n, vocab), many).tokens
    assert chi_square_p(tokens, probs) > 1e-3


def test_sample_from_unnormalised_probs() -> None:
    torch.manual_seed(0)
    weights = torch.tensor([0.0, 2.0, 0.0, 6.0, 2.0])
    tokens = Sampler.sample_from_probs(weights.expand(20000, 5), [None] * 20000)
    assert chi_square_p(tokens, weights / weights.sum()) > 1e-3


def test_bad_rows_reported_and_isolated() -> None:
    logits = torch.randn(5, V, generator=torch.Generator().manual_seed(5))
    logits[0, :10] = -math.inf  # masked vocab entries are fine
    logits[1, 3] = math.nan
    logits[2, 7] = math.inf
    logits[3] = -math.inf
    params = [SamplingParams(seed=11, top_p=0.9, logprobs=2)] * 5
    for p in (params, [SamplingParams(temperature=0.0)] * 5):
        out = sampler.sample(logits, batch(p))
        assert out.bad_rows.tolist() == [False, True, True, True, False]
        assert out.tokens[1:4].tolist() == [0, 0, 0]
        good = [0, 4]
        alone = sampler.sample(logits[good], batch([p[0]] * 2)).tokens
        assert out.tokens[good].tolist() == alone.tolist()
        assert out.tokens[0] >= 10
    probs = sampler.probs(logits, batch(params))
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(5))


def test_logprobs_are_raw() -> None:
    logits = torch.randn(3, V) * 2
    params = [
        SamplingParams(temperature=0.5, top_k=3, logprobs=0, repetition_penalty=2.0),
        SamplingParams(temperature=0.0, logprobs=4),
        SamplingParams(),
    ]
    out = sampler.sample(logits, batch(params, [([1], [2])] * 3))
    raw = torch.log_softmax(logits, -1)
    torch.testing.assert_close(out.logprobs, raw.gather(1, out.tokens[:, None]).squeeze(1))
    assert out.top_logprobs is not None and out.top_logprob_ids is not None
    assert out.top_logprobs.shape == (3, 4)
    top = raw.topk(4, dim=-1)
    torch.testing.assert_close(out.top_logprobs, top.values)
    assert torch.equal(out.top_logprob_ids, top.indices)
    only_sampled = sampler.sample(logits, batch([SamplingParams(logprobs=0)] * 3))
    assert only_sampled.logprobs is not None and only_sampled.top_logprobs is None
    assert sampler.sample(logits, batch([SamplingParams()] * 3)).logprobs is None


def test_repeat_rows_and_select() -> None:
    params = [
        SamplingParams(temperature=0.0, repetition_penalty=1.5),
        SamplingParams(top_k=5, seed=3),
        SamplingParams(top_p=0.5, min_p=0.1),
    ]
    history = [([1, 2], [3]), ([4], [5, 5]), ([6], [])]
    sb = batch(params, history)
    rep = sb.repeat_rows([2, 0, 3])
    assert rep.params == [params[0]] * 2 + [params[2]] * 3
    assert rep.batch_size == 5 and not rep.all_greedy and rep.any_greedy
    assert not rep.any_top_k and rep.any_top_p and rep.any_min_p
    assert rep.generators == [None] * 5
    logits = torch.randn(3, V)
    expanded = logits[[0, 0, 2, 2, 2]]
    direct = batch([params[i] for i in [0, 0, 2, 2, 2]], [history[i] for i in [0, 0, 2, 2, 2]])
    torch.testing.assert_close(sampler.probs(expanded, rep), sampler.probs(expanded, direct))
    sel = sb.select([1, 1])
    assert sel.generators[0] is sb.generators[1] is sel.generators[1]
    assert (
        sel.any_top_k
        and sel.max_top_k == 5
        and torch.equal(sel.output_counts[0], sb.output_counts[1])
    )
    with pytest.raises(ValueError):
        sb.repeat_rows([1, 2])

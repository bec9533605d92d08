"""The rejection kernels (``updraft.spec.rejection_kernels``) against independent references.

(``filter_rows`` against the float64 filter reference: ``test_filter_rows.py``.) ``rejection_sample`` emits the same
tokens as a float64 rejection step over the kernel's own distribution for the same uniforms,
and the whole step the same tokens as the dense path it replaced (``sampled_accept_reference``).
Its draws follow the residual and bonus distributions (evenly spaced uniforms: deterministic)
and the emitted tokens the target distribution (chi-square).

Rows whose result hinges on rounding are left out of exact comparisons and counted: a
cumulative mass within 1e-5 of ``top_p``, a logit within rounding of the min-p cut-off, an
acceptance test or an inverse-CDF target within 1e-5 of its boundary.

Without CUDA the kernels run under the Triton interpreter (tests/conftest.py turns it on), one
program at a time (~20 ms per request), so batches stay small."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from updraft.llm import LLM
from updraft.runtime.sampler import GREEDY_TEMPERATURE, Sampler, SamplingBatch
from updraft.sampling_params import SamplingParams
from updraft.spec import device_rng
from updraft.spec import rejection_kernels as rk
from updraft.spec import sampling_kernels as sk
from updraft.testing import (
    count_ops,
    filter_test_params,
    filter_test_rows,
    repeating_prompts,
    sampler_filter_reference,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sampled_accept`` runs the kernels here even under the interpreter (CPU engine runs keep
    the dense path: interpreted, the kernels cost ~50 ms per verify row)."""
    monkeypatch.setattr(rk, "INTERPRET", True)


def test_kernels_are_what_runs() -> None:
    # Otherwise every comparison below would compare the dense path with itself.
    assert rk.use_kernels(torch.empty(0, device=DEV))





@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU tests compile them for real")
def test_kernels_compile_for_an_h100() -> None:
    """The interpreter runs constructs the compiler rejects (a branch that redefines a constant
    as a tensor, a scalar mask of the wrong type): compile the fused iteration's kernels (these
    two, ``choose``, ``topk_rows``, ``argmax_rows``, ``read_rows``, ``commit`` and the n-gram
    lookup) for sm_90,
    as the H100 will, with the ptxas triton ships (no GPU needed)."""
    import os
    import subprocess
    import sys

    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this triton ships no NVIDIA backend")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    out = subprocess.run([sys.executable, "-m", "updraft.spec.compile_check"], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and "compiled" in out.stdout, out.stderr[-3000:]


# ---- references ------------------------------------------------------------------------------
def ref_reject(probs: torch.Tensor, drafts: torch.Tensor, cand: torch.Tensor, q: torch.Tensor,
               u_acc: torch.Tensor, u_res: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(accept_len [B], emitted [B, S+1], fragile [B]): the rejection step in float64 over
    ``probs`` [B, S+1, V], one request at a time."""
    bs, s = drafts.shape
    probs, q = probs.double().cpu(), q.double().cpu()
    accept = torch.zeros(bs, dtype=torch.long)
    emitted = torch.zeros(bs, s + 1, dtype=torch.long)
    fragile = torch.zeros(bs, dtype=torch.bool)
    for b in range(bs):
        acc = 0
        for k in range(s):
            d = int(drafts[b, k])
            lhs = float(u_acc[b, k]) * max(float(q[b, k][cand[b, k].cpu() == d].sum()), 1e-20)
            p_d = float(probs[b, k, d])
            fragile[b] |= abs(lhs - p_d) <= 1e-5 * max(p_d, 1e-12)
            if lhs > p_d:
                break
            acc += 1
        p = probs[b, acc]
        res = p.clone()
        if acc < s:
            ids = cand[b, acc].cpu()
            res[ids] = p[ids] - torch.minimum(p[ids], q[b, acc])
        if float(res.sum()) <= 0:
            res = p
        c = torch.cumsum(res, 0)
        target = float(u_res[b]) * float(c[-1])
        tok = min(int(torch.searchsorted(c, torch.tensor([target], dtype=torch.float64), right=True)), len(c) - 1)
        fragile[b] |= bool(((c - target).abs() <= 1e-5 * float(c[-1])).any())
        accept[b] = acc + 1
        emitted[b, :s] = drafts[b].cpu()
        emitted[b, s] = drafts[b, 0].cpu() if s else tok
        emitted[b, acc] = tok
    return accept, emitted, fragile


# ---- rejection_sample ------------------------------------------------------------------------
def _pipeline(bs: int, s: int, vocab: int, g: torch.Generator, noise: float = 1.0
              ) -> dict[str, torch.Tensor]:
    """A fused iteration's inputs: target logits [B, S+1, V], drafts drawn by ``choose`` from
    draft logits (the target's plus noise) over their best K candidates, the parameters and one
    draw of uniforms (columns as the fused graph uses them)."""
    logits = filter_test_rows("randn", bs * (s + 1), vocab, g).view(bs, s + 1, vocab)
    temp, top_k, top_p, min_p = filter_test_params(bs, vocab, g)
    u = torch.rand(bs, 2 * s + 2, generator=g).clamp(2**-24, 1 - 2**-24)
    greedy = temp < GREEDY_TEMPERATURE
    t_eff = torch.where(greedy, 1.0, temp)
    k_eff = torch.where(greedy, 1, top_k)
    p_eff = torch.where(top_p < 1, top_p, math.inf)
    k = min(64, vocab)
    drafts, cands, qs = [], [], []
    for j in range(s):
        draft = logits[:, j] + noise * torch.randn(bs, vocab, generator=g) * torch.rand(bs, 1, generator=g)
        vals, cand = draft.topk(k, dim=-1)
        q, pick = sk.choose(vals.to(DEV), t_eff.to(DEV), k_eff.to(DEV), p_eff.to(DEV), min_p.to(DEV),
                            u[:, j].to(DEV))
        drafts.append(cand.gather(1, pick.cpu()[:, None])[:, 0])
        cands.append(cand)
        qs.append(q.cpu())
    empty = torch.empty(bs, 0, dtype=torch.long)
    return {
        "logits": logits, "temp": temp, "top_k": top_k, "top_p": top_p, "min_p": min_p, "u": u,
        "drafts": torch.stack(drafts, 1) if s else empty,
        "cand": torch.stack(cands, 1) if s else torch.empty(bs, 0, k, dtype=torch.long),
        "q": torch.stack(qs, 1) if s else torch.empty(bs, 0, k),
    }


def _run(case: dict[str, torch.Tensor],
         fn: Callable[..., tuple[torch.Tensor, torch.Tensor]] = rk.sampled_accept) -> tuple[torch.Tensor, torch.Tensor]:
    s = case["drafts"].shape[1]
    u = case["u"].to(DEV)
    args = [case[n].to(DEV) for n in ("logits", "drafts", "cand", "q", "temp", "top_k", "top_p", "min_p")]
    acc, em = fn(*args, u[:, s : 2 * s], u[:, 2 * s] if s else u[:, 1])
    return acc.cpu(), em.cpu()


@pytest.mark.parametrize("s,vocab", [(0, 300), (1, 777), (3, 300), (5, 5000)])
def test_rejection_matches_float64_and_the_dense_path(s: int, vocab: int) -> None:
    g = torch.Generator().manual_seed(100 * s + vocab)
    bs = 16
    case = _pipeline(bs, s, vocab, g)
    acc, em = _run(case)
    assert acc.dtype == em.dtype == torch.int64 and em.shape == (bs, s + 1)
    assert int(acc.min()) >= 1 and int(acc.max()) <= s + 1
    # 1. Against a float64 rejection step over the kernel's own distribution.
    flat = case["logits"].view(-1, vocab).to(DEV)
    ndt = s + 1
    stats = rk.filter_rows(flat, ndt, *(case[n].to(DEV) for n in ("temp", "top_k", "top_p", "min_p")))
    probs = rk.probs_from_stats(flat, ndt, case["temp"].to(DEV), stats).view(bs, ndt, vocab)
    u = case["u"]
    r_acc, r_em, fragile = ref_reject(probs, case["drafts"], case["cand"], case["q"], u[:, s : 2 * s],
                                      u[:, 2 * s] if s else u[:, 1])
    ok = ~fragile
    assert int(ok.sum()) >= bs - 2, f"{int(fragile.sum())} fragile requests"
    assert torch.equal(acc[ok], r_acc[ok]) and torch.equal(em[ok], r_em[ok])
    # 2. Against the dense path it replaced (Sampler.probs + rejection_accept), the same
    # uniforms: the same tokens unless a row's filter hinges on rounding.
    d_acc, d_em = _run(case, rk.sampled_accept_reference)
    rows_fragile = sampler_filter_reference(case["logits"].view(-1, vocab), case["temp"].repeat_interleave(ndt),
                              case["top_k"].repeat_interleave(ndt), case["top_p"].repeat_interleave(ndt),
                              case["min_p"].repeat_interleave(ndt))[2].view(bs, ndt).any(-1)
    ok &= ~rows_fragile
    assert int(ok.sum()) >= bs - 3
    assert torch.equal(acc[ok], d_acc[ok]) and torch.equal(em[ok], d_em[ok])
    # 3. Greedy rows are exactly greedy: drafts accepted while they equal the argmax.
    greedy = case["temp"] < GREEDY_TEMPERATURE
    top = case["logits"].argmax(-1)
    for b in torch.nonzero(greedy)[:, 0].tolist():
        match = (case["drafts"][b] == top[b, :s]).int().cumprod(0).sum()
        assert int(acc[b]) == int(match) + 1 and torch.equal(em[b, : int(acc[b])], top[b, : int(acc[b])])


def test_tickets_end_at_zero_and_a_relaunch_repeats() -> None:
    """Three vocabulary blocks per request (the last one partial): the caller's tickets are back
    at 0 after the launch, and a second launch on them emits the same tokens (a ticket left
    behind would make the wrong program draw, or none)."""
    s, vocab, bs = 2, 2 * 4096 + 300, 3
    case = _pipeline(bs, s, vocab, torch.Generator().manual_seed(31))
    tickets = torch.zeros(bs + 1, dtype=torch.int32, device=DEV)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        return _run(case, lambda *a: rk.sampled_accept(*a, tickets=tickets))

    first = run()
    assert int(tickets.abs().sum()) == 0
    assert all(torch.equal(x, y) for x, y in zip(first, run())) and int(tickets.abs().sum()) == 0
    assert all(torch.equal(x, y) for x, y in zip(first, _run(case)))  # fresh tickets: the same


@pytest.mark.parametrize("s,vocab", [(3, 2000)])
def test_rejection_with_bf16_values_takes_the_same_tokens(s: int, vocab: int) -> None:
    """A bf16 target's rows through ``filter_hist`` (rows with a top-k / top-p cut-off) and the
    one-program filter (the others): the same tokens as the one-program filter alone, for the
    same uniforms, unless a row's filter hinges on rounding."""
    g = torch.Generator().manual_seed(7 * s + vocab)
    bs = 8
    case = _pipeline(bs, s, vocab, g)
    case["logits"] = case["logits"].to(torch.bfloat16).float()
    acc, em = _run(case)
    h_acc, h_em = _run(case, lambda *a: rk.sampled_accept(*a, bf16_values=True))
    ndt = s + 1
    fragile = sampler_filter_reference(case["logits"].view(-1, vocab), case["temp"].repeat_interleave(ndt),
                         case["top_k"].repeat_interleave(ndt), case["top_p"].repeat_interleave(ndt),
                         case["min_p"].repeat_interleave(ndt))[2].view(bs, ndt).any(-1)
    ok = ~fragile
    assert int(ok.sum()) >= bs - 2
    assert torch.equal(acc[ok], h_acc[ok]) and torch.equal(em[ok], h_em[ok])


def _one_row_case(vocab: int, n: int, g: torch.Generator, top_p: float = 0.85, top_k: int = -1
                  ) -> dict[str, torch.Tensor]:
    """``n`` copies of one request (S = 1): target rows, the draft's q over every token (the
    target's first row, its second best token boosted: q over- and under-covers p)."""
    logits = (torch.randn(1, 2, vocab, generator=g) * 1.5).expand(n, 2, vocab).contiguous()
    draft = logits[0, 0].clone()
    draft[draft.topk(2).indices[1]] += 1.5
    vals, cand = draft[None].topk(vocab, dim=-1)
    q, _ = sk.choose_reference(vals, torch.ones(1), torch.zeros(1, dtype=torch.long),
                               torch.full((1,), math.inf), torch.zeros(1), torch.full((1,), 0.5))
    return {"logits": logits, "temp": torch.full((n,), 0.8), "top_k": torch.full((n,), top_k),
            "top_p": torch.full((n,), top_p), "min_p": torch.zeros(n),
            "cand": cand.expand(n, 1, vocab).contiguous(), "q": q.expand(n, 1, vocab).contiguous()}


def test_draws_follow_residual_and_bonus() -> None:
    """Evenly spaced uniforms: after a rejection the draws follow normalise(max(p - q, 0)), after
    an acceptance the bonus follows p_1, each within 2 / n per token; and the acceptance test is
    exactly u * q(d) <= p(d) around its boundary."""
    n, vocab = 128, 40
    case = _one_row_case(vocab, 1, torch.Generator().manual_seed(5))
    flat = case["logits"].view(-1, vocab).to(DEV)
    stats = rk.filter_rows(flat, 2, *(case[k].to(DEV) for k in ("temp", "top_k", "top_p", "min_p")))
    p = rk.probs_from_stats(flat, 2, case["temp"].to(DEV), stats).cpu().double()
    cand, q = case["cand"][0, 0], case["q"][0, 0].double()
    q_dense = torch.zeros(vocab, dtype=torch.float64).scatter_(0, cand, q)
    ratio = torch.where(q_dense > 0, p[0] / q_dense.clamp_min(1e-30), math.inf)
    rejected = int(ratio.argmin())  # p(d) / q(d) smallest: always rejected with u ~ 1
    edge_tok = int(torch.where(p[0] > 0, ratio, math.inf).argmin())  # p(d) / q(d) < 1, p(d) > 0
    accepted = int(torch.where(p[0] > 0, p[0] - q_dense, -math.inf).argmax())  # p(d) >= q(d)
    assert float(ratio[edge_tok]) < 0.9 and float(p[0, accepted]) >= float(q_dense[accepted])
    grid = (torch.arange(n) + 0.5) / n

    def run(draft: int, u_acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = len(u_acc)
        acc, em = rk.rejection_sample(flat.repeat(m, 1), stats.repeat(m, 1), case["temp"].expand(m).to(DEV),
                                      torch.full((m, 1), draft, device=DEV), case["cand"].expand(m, 1, vocab).to(DEV),
                                      case["q"].expand(m, 1, vocab).to(DEV), u_acc[:, None].to(DEV), grid[:m].to(DEV))
        return acc.cpu(), em.cpu()

    acc, em = run(rejected, torch.full((n,), 1 - 2**-24))
    assert bool((acc == 1).all())
    residual = (p[0] - torch.minimum(p[0], q_dense)).clamp_min(0)
    freq = torch.bincount(em[:, 0], minlength=vocab).double() / n
    assert float((freq - residual / residual.sum()).abs().max()) <= 2 / n
    acc, em = run(accepted, torch.full((n,), 2**-24))
    assert bool((acc == 2).all()) and bool((em[:, 0] == accepted).all())
    freq = torch.bincount(em[:, 1], minlength=vocab).double() / n
    assert float((freq - p[1]).abs().max()) <= 2 / n
    # The acceptance boundary u = p(d) / q(d): just below accepts, just above rejects.
    edge = float(ratio[edge_tok])
    acc, _ = run(edge_tok, torch.tensor([edge * (1 - 1e-4), edge * (1 + 1e-4)]))
    assert acc.tolist() == [2, 1]


def _chi_p(obs: np.ndarray, probs: np.ndarray) -> float:
    keep = probs > 0
    assert obs[~keep].sum() == 0, "a token outside the support was emitted"
    pr = probs[keep] / probs[keep].sum()
    return float(chisquare(obs[keep], pr * obs[keep].sum()).pvalue)


def test_rejection_sampling_is_lossless_chi_square() -> None:
    """Drafts drawn from q with counter-based uniforms, then the kernels: the first emitted
    token follows p_0 and the one after an accepted first draft p_1 (T 0.8, top-k 6 and top-p:
    the filtered distributions). 1000 requests keep the interpreter at ~20 s; the
    deterministic test above has the precision."""
    n, vocab = 1000, 12
    case = _one_row_case(vocab, 1, torch.Generator().manual_seed(11), top_p=0.95, top_k=6)
    flat = case["logits"].view(-1, vocab).to(DEV)
    stats = rk.filter_rows(flat, 2, *(case[k].to(DEV) for k in ("temp", "top_k", "top_p", "min_p")))
    u = device_rng.uniform(torch.arange(n) * 7919, torch.full((n,), 3, dtype=torch.long), 1000, 3)
    q_dense = torch.zeros(vocab).scatter_(0, case["cand"][0, 0], case["q"][0, 0])
    drafts = device_rng.inverse_cdf(q_dense.expand(n, vocab), u[:, 0])[:, None]
    acc, em = rk.rejection_sample(flat.repeat(n, 1), stats.repeat(n, 1), case["temp"].expand(n).to(DEV),
                                  drafts.to(DEV), case["cand"].expand(n, 1, vocab).to(DEV),
                                  case["q"].expand(n, 1, vocab).to(DEV), u[:, 1:2].to(DEV), u[:, 2].to(DEV))
    acc, em = acc.cpu(), em.cpu()
    sb = SamplingBatch.on_device(torch.full((2,), 0.8), torch.full((2,), 6), torch.full((2,), 0.95),
                                 torch.zeros(2), vocab)
    p = Sampler().probs(case["logits"][0], sb).double().numpy()
    assert _chi_p(np.bincount(em[:, 0].numpy(), minlength=vocab), p[0]) > 1e-4
    second = em[acc.numpy() >= 2, 1].numpy()
    assert len(second) > 200
    assert _chi_p(np.bincount(second, minlength=vocab), p[1]) > 1e-4


# ---- the fused iteration ---------------------------------------------------------------------
#: The engine tests below run the fused graph emulated on the CPU, with the kernels interpreted.
cpu_engine = pytest.mark.skipif(not sk.interpreter_on(), reason="CPU engine with the Triton interpreter")


def _fused(target: Path, head: Path | None = None) -> LLM:
    spec = None if head is None else {"method": "eagle", "draft_model": str(head), "num_steps": 3,
                                      "adaptive": False}
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4],
              speculative_config=spec)
    assert llm.engine.driver is not None, llm.engine.graph_log
    return llm


@cpu_engine
@pytest.mark.parametrize("speculate", [True, False])
def test_fused_engine_kernels_match_the_dense_path(target, eagle_head, monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
                                                   speculate: bool) -> None:
    """Seeded requests with every filter and a greedy one, through the fused graph (emulated) at
    S = 3 (speculate) and S = 0 (plain decoding): the kernels emit exactly what the dense path
    emits for the same counter-based uniforms (the dense path's runs repeat and follow the
    target distribution end to end: test_fused.py)."""
    ps = repeating_prompts(4, seed=5)
    params = [SamplingParams(temperature=0.8, top_p=0.9, max_tokens=8, seed=7, ignore_eos=True),
              SamplingParams(temperature=1.2, top_k=20, min_p=0.05, max_tokens=8, seed=8, ignore_eos=True),
              SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True),
              SamplingParams(temperature=0.6, top_k=5, top_p=0.8, max_tokens=8, seed=9, ignore_eos=True)]

    def run(kernels: bool) -> list[list[int]]:
        monkeypatch.setattr(rk, "INTERPRET", kernels)
        llm = _fused(target, eagle_head if speculate else None)
        outs = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
        assert llm.engine.driver is not None and llm.engine.driver.launches > 0
        return outs

    dense = run(False)
    assert run(True) == dense
    assert all(len(o) == 8 for o in dense)


@cpu_engine
def test_sampled_body_costs_about_a_greedy_one(target, eagle_head) -> None:  # noqa: ANN001
    """CPU proxy for the sampled cycle (``benchmarks/sampled_ops.py``): the captured body at
    S = 3, bs 1, sampled, issues at most 12 aten compute ops and 2 S + 2 Triton launches (a
    ``topk_rows`` and a ``choose`` per draft, the two rejection kernels; the uniforms are drawn in
    the launch that reads the rows) more than the greedy one. The dense path it replaced issued
    ~90 more, which this budget rejects."""
    fused = _fused(target, eagle_head).engine.driver.fused

    def ops(sampled: bool) -> tuple[int, int]:
        g = fused._build(3, sampled, 1)
        fused._body(g)
        c = count_ops(lambda: fused._body(g))
        return c.compute, c.triton

    with torch.inference_mode():
        greedy, sampled = ops(False), ops(True)
        rk.INTERPRET = False  # the dense path (restored by the autouse fixture)
        dense = ops(True)
    assert sampled[0] <= greedy[0] + 12 and sampled[1] <= greedy[1] + 2 * 3 + 2, (greedy, sampled)
    assert dense[0] > greedy[0] + 50, (greedy, dense)

"""One speculative iteration (chain, v2 semantics by default) for a batch of decoding requests.

For requests with committed length ``N`` (the bonus token last, not yet in the target's KV):

1. DRAFT_DECODE: the proposer produces S drafts (a draft model runs S-1 forwards; the first
   draft came from the previous draft extend or the draft prefill).
2. TARGET_VERIFY: the target runs over [bonus, d_1..d_S] at positions N-1..N+S-1 (fixed stride
   ndt = S+1), keeping the hidden states the draft needs.
3. Accept: greedy matching, or lossless rejection sampling for temperature > 0.
4. Draft extend (v2 over all ndt rows, or v1 over the accepted rows); rejected KV tails are left
   in place and overwritten next iteration.

Only one host sync per iteration (the accept lengths and emitted tokens), except the v1 extend,
which needs the accept lengths on the host to pack its rows.

S is chosen per iteration by ``AdaptiveSteps`` (priced exploration: a larger S can cost several
plain steps here), from the wall time of this path's iterations per (S, batch bucket), the time
between them (the engine's host work) and the running acceptance. S = 0 is a plain DECODE step
of the target; a draft model falls behind during such steps (``fall_behind`` keeps the target
features it will need) and catches up in one extend over the tokens it missed when S > 0 runs
again, so an S = 0 iteration costs what a plain step does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from updraft.batch import CaptureHidden, ForwardMode
from updraft.runtime.model_runner import ModelRunner
from updraft.runtime.sampler import Sampler, SamplingBatch
from updraft.runtime.timing import PhaseTimer
from updraft.spec.adaptive import AdaptiveSteps
from updraft.spec.lookup_assist import HostLookupAssist
from updraft.spec.proposers import Drafts, Proposer
from updraft.spec.request_view import SpecRequestView
from updraft.spec.verify import greedy_accept, rejection_accept


@dataclass
class SpecStepResult:
    tokens: list[list[int]]  # emitted tokens per request (accept_len of them)
    accept_lens: list[int]
    logprobs: list[list[dict]] | None = None


#: Iterations further apart than this are not back to back (a prefill or idle time came between).
_STEADY_GAP_S = 2.0


class SpecWorker:
    def __init__(
        self,
        target: ModelRunner,
        proposer: Proposer,
        num_steps: int,
        sampler: Sampler,
        timer: PhaseTimer | None = None,
        adaptive: AdaptiveSteps | None = None,
        assist: HostLookupAssist | None = None,
    ) -> None:
        self.target = target
        self.proposer = proposer
        self.assist = assist  # lookups verified where a request repeats itself (draft models)
        self.num_steps = num_steps  # the largest S (KV lookahead and graphs are sized for it)
        self.ndt = num_steps + 1
        self.sampler = sampler
        self.timer = timer if timer is not None else PhaseTimer(target.device, enabled=False)
        self.adaptive = adaptive if adaptive is not None else AdaptiveSteps([num_steps], enabled=False)
        self._last_end: float | None = None  # when the previous iteration of this path ended

    @property
    def target_capture(self) -> CaptureHidden:
        return CaptureHidden.FULL if self.proposer.needs_target_hidden else CaptureHidden.NONE

    def target_hidden(self, out) -> torch.Tensor | None:  # noqa: ANN001 - ModelOutput
        """The feature the draft reads: EAGLE-3's three-layer concat, else the final hidden."""
        if not self.proposer.needs_target_hidden:
            return None
        return out.aux_hidden if out.aux_hidden is not None else out.hidden

    def step(self, reqs: list[SpecRequestView]) -> SpecStepResult:
        """One iteration with an adaptively chosen S; its wall time and the host's work since
        the previous one are its cost samples."""
        bucket = 1 << (len(reqs) - 1).bit_length()
        sampled = any(not r.params.greedy for r in reqs)
        # A request with its own seed repeats token for token only if every iteration drafts the
        # same S (its random numbers are drawn per iteration): pin S for such batches.
        seeded = any(r.params.seed is not None and not r.params.greedy for r in reqs)
        s = self.adaptive.max_steps if seeded else self.adaptive.choose(bucket, sampled)
        t0 = time.perf_counter()
        if self._last_end is not None and t0 - self._last_end < _STEADY_GAP_S:
            self.adaptive.record_host(bucket, t0 - self._last_end, sampled)
        res = self.speculate(reqs, s) if s else self.plain(reqs)
        self._last_end = time.perf_counter()
        self.adaptive.record_device(s, bucket, self._last_end - t0, sampled)
        self.adaptive.record(s, res.accept_lens)
        return res

    def release(self, req: SpecRequestView) -> None:
        """The request finished: the proposer's and the assist's state of it go."""
        self.proposer.release(req)
        if self.assist is not None:
            self.assist.release(req.request_id)

    def observe(self, req: SpecRequestView, tokens: list[int]) -> None:
        """``tokens`` joined the request's output (the engine's emit): the proposer may keep some."""
        self.proposer.observe(req, tokens)

    def flush_observed(self) -> None:
        """Once a step, after its emits: what ``observe`` queued reaches the device in one batch."""
        self.proposer.flush_observed()

    def catch_up(self, reqs: list[SpecRequestView]) -> None:
        """Bring the draft of ``reqs`` up to date (before anything else drafts for them)."""
        with self.timer("catch_up"):
            self.proposer.catch_up(reqs)

    def plain(self, reqs: list[SpecRequestView]) -> SpecStepResult:
        """S = 0: a plain decode step of the target; the draft falls behind by one token."""
        bsz = len(reqs)
        with self.timer("decode"):
            seq_lens = [r.seq_len for r in reqs]
            batch = self.target.make_batch(
                ForwardMode.DECODE, [r.last_token for r in reqs], [r.row for r in reqs], seq_lens, [1] * bsz,
                logits="last", stride=1, capture_hidden=self.target_capture,
            )
            out = self.target.forward(batch)
        with self.timer("accept"):
            logits = out.logits.view(bsz, 1, -1)
            none = torch.empty(bsz, 0, dtype=torch.long, device=logits.device)
            accept_len, emitted = self._accept(reqs, Drafts(none, None), logits)
        self.proposer.fall_behind(reqs, seq_lens, self.target_hidden(out))
        return self._finish(reqs, 0, accept_len, emitted, logits)

    def speculate(self, reqs: list[SpecRequestView], s: int) -> SpecStepResult:
        """One iteration with S drafts."""
        ndt = s + 1
        bsz = len(reqs)
        dev = self.target.device
        timer = self.timer
        self.catch_up(reqs)
        with timer("draft"):
            drafts = self.proposer.propose(reqs, s)
            if self.assist is not None:
                drafts = Drafts(*self.assist.apply(reqs, drafts.tokens, drafts.q))
        with timer("verify"):
            bonus = torch.tensor([r.last_token for r in reqs], dtype=torch.long).to(dev, non_blocking=True)
            ids = torch.cat([bonus[:, None], drafts.tokens], dim=1)  # [B, ndt]
            seq_lens = [r.seq_len for r in reqs]
            batch = self.target.make_batch(
                ForwardMode.TARGET_VERIFY,
                ids.reshape(-1),
                [r.row for r in reqs],
                [n + s for n in seq_lens],
                [ndt] * bsz,
                logits="all",
                stride=ndt,
                capture_hidden=self.target_capture,
            )
            out = self.target.forward(batch)
        with timer("accept"):
            logits = out.logits.view(bsz, ndt, -1)
            accept_len, emitted = self._accept(reqs, drafts, logits)
        with timer("extend"):
            self.proposer.after_verify(reqs, seq_lens, emitted, accept_len, self.target_hidden(out))
        return self._finish(reqs, s, accept_len, emitted, logits)

    def _finish(
        self, reqs: list[SpecRequestView], s: int, accept_len: torch.Tensor, emitted: torch.Tensor, logits: torch.Tensor
    ) -> SpecStepResult:
        with self.timer("sync"):
            lp = self._logprobs(reqs, logits, emitted) if any(r.params.logprobs is not None for r in reqs) else None
            acc = accept_len.tolist()  # the one host sync
            em = emitted.tolist()
        tokens = [row[:a] for row, a in zip(em, acc)]
        if s:
            for req, a in zip(reqs, acc):
                req.spec.record(s, a - 1)
        logprobs = [row[:a] for row, a in zip(lp, acc)] if lp is not None else None
        return SpecStepResult(tokens, acc, logprobs)

    def _accept(self, reqs: list[SpecRequestView], drafts, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
        bsz, ndt, vocab = logits.shape
        params = [r.params for r in reqs]
        if all(p.greedy for p in params) and not any(p.uses_penalties for p in params):
            return greedy_accept(drafts.tokens, logits.argmax(-1))
        # Per verify row: the request's params, and for penalties the history including the
        # drafts before that row (row k follows the bonus and d_1..d_k).
        sb = SamplingBatch.build(
            params,
            [r.generator for r in reqs],
            vocab,
            logits.device,
            [(r.prompt_ids, r.output_ids) for r in reqs] if any(p.uses_penalties for p in params) else None,
        ).repeat_rows([ndt] * bsz)
        if sb.any_penalty:
            valid = torch.ones(bsz * ndt, dtype=torch.bool, device=logits.device)
            for k in range(1, ndt):
                # rows with offset >= k have seen draft k (d_k is drafts[:, k-1])
                toks = drafts.tokens[:, k - 1].repeat_interleave(ndt)
                mask = (torch.arange(bsz * ndt, device=logits.device) % ndt) >= k
                sb.record_output(torch.where(mask, toks, torch.zeros_like(toks)), valid & mask)
        probs = self.sampler.probs(logits.reshape(bsz * ndt, vocab), sb).view(bsz, ndt, vocab)
        greedy = torch.tensor([p.greedy for p in params], device=logits.device)
        g_len, g_em = greedy_accept(drafts.tokens, probs.argmax(-1))
        if bool(greedy.all()):
            return g_len, g_em
        r_len, r_em = rejection_accept(drafts.tokens, drafts.q, probs, [r.generator for r in reqs])
        return torch.where(greedy, g_len, r_len), torch.where(greedy[:, None], g_em, r_em)

    def _logprobs(self, reqs: list[SpecRequestView], logits: torch.Tensor, emitted: torch.Tensor) -> list[list[dict]]:
        """Raw log-probabilities of the emitted tokens (and top-k), per verify row."""
        lsm = torch.log_softmax(logits.float(), dim=-1)
        chosen = lsm.gather(-1, emitted[..., None]).squeeze(-1).tolist()
        k = max((r.params.logprobs or 0) for r in reqs)
        top_v, top_i = (lsm.topk(k, dim=-1) if k else (None, None))
        em = emitted.tolist()
        out = []
        for b, req in enumerate(reqs):
            rows = []
            for i in range(emitted.shape[1]):
                entry = {"token_id": em[b][i], "logprob": chosen[b][i], "top": []}
                if req.params.logprobs and top_v is not None and top_i is not None:
                    n = req.params.logprobs
                    entry["top"] = list(zip(top_i[b, i, :n].tolist(), top_v[b, i, :n].tolist()))
                rows.append(entry)
            out.append(rows)
        return out

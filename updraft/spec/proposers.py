"""Draft proposers: n-gram lookup, and draft models (EAGLE, EAGLE-3 heads, standalone LMs).

Draft models share ``req_to_token`` with the target and keep their own KV pool. Position
conventions (see also ``updraft.spec.worker``): a committed sequence has ``N`` tokens, the last
one (the bonus) not yet in the target's KV.

* EAGLE reads (token ``j+1``, feature of position ``j``) at draft position ``j`` (``shift = 1``):
  its KV is valid for positions ``<= N-2`` and its row ``N-2`` yields the first draft. An MTP
  head's K modules do too, each with its own KV layer (``updraft.models.mtp``: what module ``m``
  reads at each position, where chain step ``j`` runs); every extend returns the modules' states
  at its last row, kept in the head (``keep_layer_states``) from the output of the path that ran.
* A standalone LM reads token ``j`` at position ``j`` (``shift = 0``): KV valid ``<= N-1``.

``next_token`` / ``next_hidden`` / ``next_q`` hold, per request-pool row, the first draft of the
next iteration (and the feature and draft distribution it came from): preallocated tensors that
the graph issue can index without host lists.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace

import torch

from updraft.batch import CaptureHidden, FeatureKind, ForwardMode
from updraft.models.eagle import Eagle3Head, EagleHead, draft_to_target
from updraft.models.llama import ModelOutput
from updraft.models.mtp import MtpHead, chain_step
from updraft.runtime.graphs.draft_chain import DraftChainGraph
from updraft.runtime.graphs.phase_graph import CaptureStats
from updraft.runtime.model_runner import ModelRunner
from updraft.runtime.sampler import Sampler, SamplingBatch
from updraft.spec.context_vocab import ContextVocab
from updraft.spec.ngram import RequestHistories
from updraft.spec.request_view import SpecRequestView


@dataclass
class _Lag:
    """A draft model behind the target: it was current at committed length ``synced``; EAGLE
    keeps the target's features of the positions it missed (``synced - 1`` on, one per token)."""

    synced: int
    features: list[torch.Tensor]


@dataclass
class Drafts:
    tokens: torch.Tensor  # [B, S] target token ids
    q: torch.Tensor | None  # [B, S, V] distribution each draft was sampled from; None = deterministic


class Proposer(ABC):
    needs_target_hidden: bool = False
    #: KV positions a decoding request needs beyond its length (the target needs S).
    extra_lookahead: int = 0

    def on_prefill(
        self,
        reqs: list[SpecRequestView],
        starts: list[int],
        lens: list[int],
        finished_prefill: list[bool],
        target_hidden: torch.Tensor | None,
    ) -> None:
        """After a target prefill chunk (and, for finished prefills, after the bonus token was
        appended to the request). Proposers without a model have nothing to do."""
        return None

    @abstractmethod
    def propose(self, reqs: list[SpecRequestView], num_steps: int) -> Drafts: ...

    def after_verify(
        self,
        reqs: list[SpecRequestView],
        seq_lens: list[int],
        emitted: torch.Tensor,
        accept_len: torch.Tensor,
        target_hidden: torch.Tensor | None,
    ) -> None:
        """Draft extend after verification (model proposers)."""
        return None

    def fall_behind(self, reqs: list[SpecRequestView], seq_lens: list[int], target_hidden: torch.Tensor | None) -> None:
        """A plain target step (S = 0) ran for ``reqs`` at committed lengths ``seq_lens`` without
        the draft; ``target_hidden`` holds the target's features of that step, one row each.
        Proposers without a model have nothing to do."""
        return None

    def catch_up(self, reqs: list[SpecRequestView]) -> None:
        """Make the draft of ``reqs`` current after ``fall_behind`` steps (before drafting)."""
        return None

    def redraft_first(self, reqs: list[SpecRequestView]) -> None:
        """Before a per-phase iteration that follows fused ones: recompute a first draft that the
        fused iteration kept only on the device (draft models). Lookups have nothing to redo."""
        return None

    def release(self, req: SpecRequestView) -> None:
        """The request finished or was preempted."""
        return None

    def observe(self, req: SpecRequestView, tokens: list[int]) -> None:
        """``tokens`` were just appended to the request's output (host, every emit)."""
        return None

    def flush_observed(self) -> None:
        """The engine's step emitted everything it will: device writes ``observe`` queued go now."""
        return None


class NgramProposer(Proposer):
    def __init__(self, n_min: int, n_max: int, device: torch.device) -> None:
        self.n_min, self.n_max, self.device = n_min, n_max, device
        self.histories = RequestHistories(n_min, n_max)
        self.matches = 0
        self.lookups = 0

    def propose(self, reqs: list[SpecRequestView], num_steps: int) -> Drafts:
        rows = []
        for req in reqs:
            idx = self.histories.synced(req.request_id, req.prompt_ids, req.output_ids, req.seq_len)
            drafts, found = idx.propose(num_steps)
            self.lookups += 1
            self.matches += int(found)
            rows.append(drafts)
        return Drafts(torch.tensor(rows, dtype=torch.long).to(self.device, non_blocking=True), None)

    def release(self, req: SpecRequestView) -> None:
        self.histories.release(req.request_id)


class DraftModelProposer(Proposer):
    """EAGLE / EAGLE-3 / MTP heads and standalone draft LMs, run by their own ModelRunner."""

    def __init__(self, runner: ModelRunner, kind: str, draft_extend: str, sampler: Sampler, context_vocab: int = 0) -> None:
        self.runner = runner
        self.kind = kind  # "eagle", "eagle3", "mtp" or "standalone"
        self.shift = 0 if kind == "standalone" else 1
        self.draft_extend = draft_extend
        self.needs_target_hidden = kind != "standalone"
        self.extra_lookahead = 1 - self.shift  # standalone writes one position further
        self.sampler = sampler
        model = runner.model
        rows = runner.req_pool.max_reqs + 1
        dev = runner.device
        self.next_token = torch.zeros(rows, dtype=torch.long, device=dev)
        hidden = model.config.hidden_size
        self.next_hidden = torch.zeros(rows, hidden, dtype=runner.dtype, device=dev) if self.shift else None
        self.next_q: torch.Tensor | None = None  # [rows, V] allocated when a sampling request shows up
        if isinstance(model, MtpHead):
            model.alloc_layer_states(rows)  # before any capture: the extend graphs read them
        self.vocab = self._target_vocab()
        #: Draft logit index -> target id (EAGLE-3's draft vocabulary, an EAGLE-1 token map).
        self.to_target = draft_to_target(model)
        #: EAGLE-3 with ``SpeculativeConfig.context_vocab``: each row's prompt tokens outside the draft
        #: vocabulary, which its greedy drafts may propose (``updraft.spec.context_vocab``)
        self.context = ContextVocab(model, rows, context_vocab) if context_vocab and isinstance(model, Eagle3Head) else None
        #: The S-1 draft forwards in one graph (greedy batches), from ``capture_chain``.
        self._chain: DraftChainGraph | None = None
        self._chain_on = True  # see ``enable_chain``
        self.chain_counts: dict[str, int] = {}
        #: request id -> how far its draft is behind (only while S = 0 steps ran since it drafted)
        self._lag: dict[str, _Lag] = {}

    def capture_chain(self, num_steps: int, sizes: list[int], *, emulate: bool) -> CaptureStats:
        """Capture the ``num_steps - 1`` draft forwards of an iteration as one graph."""
        r = self.runner
        chain = DraftChainGraph(r.model, r.backend, r.req_pool.req_to_token, num_steps - 1, sizes,
                                hidden_dim=r.config.hidden_size if self.shift else 0, emulate=emulate,
                                pool=r.graph_pool(emulate), pick=self.context.pick if self.context is not None else None)
        stats = chain.capture()
        self._chain = chain
        return stats

    @property
    def chain(self) -> DraftChainGraph | None:
        """The captured draft chain, if it may replay."""
        return self._chain if self._chain_on else None

    @property
    def captured_chain(self) -> DraftChainGraph | None:
        return self._chain

    def enable_chain(self, on: bool) -> None:
        """Let the captured chain replay (default) or run the draft steps one by one; the kit
        tests the chain graph against its eager steps inside a running engine."""
        self._chain_on = on

    def _target_vocab(self) -> int:
        model = self.runner.model
        if isinstance(model, (EagleHead, Eagle3Head, MtpHead)):
            return model.shared._target[0].config.vocab_size
        return model.config.vocab_size

    # ---- choosing the next draft from draft logits -------------------------------------
    def _choose(self, reqs: list[SpecRequestView], logits: torch.Tensor, rows: torch.Tensor | None = None,
                feature: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Draft token per row (target ids) and, for sampling requests, the distribution q it
        was drawn from (over target ids). Greedy requests take the argmax (or a context token:
        ``ContextVocab.pick``, given the rows and their pre-norm features)."""
        to_target = self.to_target
        if all(r.params.greedy for r in reqs):
            if self.context is not None and rows is not None and feature is not None:
                dst = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
                return self.context.pick(logits, feature, rows, dst), None
            ids = logits.argmax(-1)
            return (to_target(ids) if to_target is not None else ids), None
        # The draft distribution uses the request's temperature / top-k / top-p / min-p (no
        # penalties: any q keeps rejection sampling lossless, as long as it is the q we used).
        params = [replace(r.params, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0) for r in reqs]
        sb = SamplingBatch.build(params, [r.generator for r in reqs], logits.shape[-1], logits.device, None)
        q_draft = self.sampler.probs(logits, sb)
        ids = Sampler.sample_from_probs(q_draft, [r.generator for r in reqs])
        if to_target is not None:
            # q over target ids (zero outside the draft vocabulary): verification compares it
            # with the target's distribution token by token.
            q = torch.zeros(q_draft.shape[0], self.vocab, dtype=q_draft.dtype, device=q_draft.device)
            q.scatter_(1, to_target(torch.arange(q_draft.shape[1], device=q.device)).expand_as(q_draft), q_draft)
            return to_target(ids), q
        return ids, q_draft

    def _keep_states(self, rows: torch.Tensor, out: ModelOutput) -> None:
        """After an extend of ``rows``: an MTP head keeps its modules' states at the last row,
        from ``out``, the output of the path that ran (a graph's buffers only if it replayed)."""
        model = self.runner.model
        if isinstance(model, MtpHead):
            model.keep_layer_states(rows, out.aux_hidden)

    def _store_next(self, reqs: list[SpecRequestView], rows: torch.Tensor, logits: torch.Tensor, hidden: torch.Tensor | None) -> None:
        tok, q = self._choose(reqs, logits, rows, hidden)
        self.next_token[rows] = tok
        if self.next_hidden is not None and hidden is not None:
            self.next_hidden[rows] = hidden.to(self.next_hidden.dtype)
        if q is not None:
            if self.next_q is None:
                self.next_q = torch.zeros(self.next_token.shape[0], self.vocab, device=q.device)
            self.next_q[rows] = q

    def redraft_first(self, reqs: list[SpecRequestView]) -> None:
        """Recompute the first draft (and its q) of ``reqs`` from their stored draft features.
        The fused iteration keeps only the feature (its next iteration applies the LM head), so
        this runs before a per-phase iteration that follows fused ones."""
        if not reqs or self.next_hidden is None:
            return
        rows = torch.tensor([r.row for r in reqs], dtype=torch.long, device=self.runner.device)
        feat = self.next_hidden[rows]
        self._store_next(reqs, rows, self.runner.model.logits_from_feature(feat), feat)  # type: ignore[operator]

    # ---- falling behind and catching up --------------------------------------------------
    def fall_behind(self, reqs: list[SpecRequestView], seq_lens: list[int], target_hidden: torch.Tensor | None) -> None:
        for i, (req, n) in enumerate(zip(reqs, seq_lens)):
            lag = self._lag.setdefault(req.request_id, _Lag(n, []))
            if self.shift:
                assert target_hidden is not None
                # clone: a graph's output is a view its next replay overwrites
                lag.features.append(target_hidden[i : i + 1].clone())

    def catch_up(self, reqs: list[SpecRequestView]) -> None:
        """One EXTEND over every token the draft missed (EAGLE: token j+1 with the target's
        feature of position j at draft position j, as in the prefill), which also yields the
        next first draft, as a draft extend would have."""
        behind = [(r, lag) for r in reqs if (lag := self._lag.pop(r.request_id, None)) is not None]
        if not behind:
            return
        ids: list[int] = []
        seq: list[int] = []
        ext: list[int] = []
        feats: list[torch.Tensor] = []
        for req, lag in behind:
            n = req.seq_len
            missed = req.tokens(lag.synced, n)
            assert not self.shift or len(missed) == len(lag.features), "draft lag out of step with the target"
            ids.extend(missed)
            seq.append(n - self.shift)
            ext.append(len(missed))
            feats.extend(lag.features)
        reqs_b = [r for r, _ in behind]
        batch = self.runner.make_batch(
            ForwardMode.EXTEND, ids, [r.row for r in reqs_b], seq, ext, logits="last", capture_hidden=CaptureHidden.LAST,
            feature=torch.cat(feats) if self.shift else None, feature_kind=FeatureKind.TARGET,
        )
        out = self.runner.forward(batch)
        rows = torch.tensor([r.row for r in reqs_b], dtype=torch.long, device=self.runner.device)
        self._keep_states(rows, out)
        self._store_next(reqs_b, rows, out.logits, out.hidden)

    def release(self, req: SpecRequestView) -> None:
        self._lag.pop(req.request_id, None)
        if self.context is not None and req.row is not None:
            self.context.release(req.row)

    def observe(self, req: SpecRequestView, tokens: list[int]) -> None:
        if self.context is not None and req.row is not None:
            self.context.observe(req.row, tokens)

    def flush_observed(self) -> None:
        if self.context is not None:
            self.context.flush()

    # ---- prefill ---------------------------------------------------------------------
    def on_prefill(self, reqs, starts, lens, finished_prefill, target_hidden):  # type: ignore[override]
        for req in reqs:  # a (re-)prefill makes the draft current (a preempted request lost its KV)
            self._lag.pop(req.request_id, None)
            # once per request and row (a cached prefix may start it past 0): O(prompt) on the host
            if self.context is not None and req.row is not None and self.context.owner(req.row) != req.request_id:
                self.context.admit(req.row, req.prompt_ids + req.output_ids, owner=req.request_id)
        if self.context is not None:  # this prefill's first drafts read them
            self.context.flush()
        ids: list[int] = []
        seq: list[int] = []
        ext: list[int] = []
        keep: list[int] = []
        hid_rows: list[int] = []
        row0 = 0
        for i, (req, c0, n, fin) in enumerate(zip(reqs, starts, lens, finished_prefill)):
            if req.finished:
                row0 += n
                continue
            c1 = c0 + n
            if self.shift:  # EAGLE: tokens c0+1..c1 at positions c0..c1-1, features of c0..c1-1
                ids.extend(req.tokens(c0 + 1, c1 + 1))
                seq.append(c1)
                ext.append(n)
                hid_rows.extend(range(row0, row0 + n))
            else:  # standalone: tokens c0..c1-1 (+ the bonus at c1 when the prefill finished)
                m = n + (1 if fin else 0)
                ids.extend(req.tokens(c0, c0 + m))
                seq.append(c0 + m)
                ext.append(m)
            keep.append(i)
            row0 += n
        if not keep:
            return
        kept = [reqs[i] for i in keep]
        feat = None
        if self.shift:
            assert target_hidden is not None
            feat = target_hidden[torch.tensor(hid_rows, device=target_hidden.device)]
        batch = self.runner.make_batch(
            ForwardMode.EXTEND, ids, [r.row for r in kept], seq, ext, logits="last", capture_hidden=CaptureHidden.LAST,
            feature=feat, feature_kind=FeatureKind.TARGET,
        )
        out = self.runner.forward(batch)
        self._keep_states(torch.tensor([r.row for r in kept], dtype=torch.long, device=self.runner.device), out)
        done = [j for j, i in enumerate(keep) if finished_prefill[i]]
        if done:
            rows = torch.tensor([kept[j].row for j in done], device=self.runner.device)
            sel = torch.tensor(done, device=self.runner.device)
            self._store_next([kept[j] for j in done], rows, out.logits[sel], out.hidden[sel] if out.hidden is not None else None)

    # ---- drafting ----------------------------------------------------------------------
    def propose(self, reqs: list[SpecRequestView], num_steps: int) -> Drafts:
        dev = self.runner.device
        rows = torch.tensor([r.row for r in reqs], dtype=torch.long, device=dev)
        toks = [self.next_token[rows]]
        sampling = not all(r.params.greedy for r in reqs)
        qs = [self.next_q[rows]] if sampling and self.next_q is not None else []
        hidden = self.next_hidden[rows] if self.next_hidden is not None else None
        base = [r.seq_len - self.shift for r in reqs]  # KV length before this iteration's drafts
        if self.chain is not None and num_steps > 1:
            ok, reason = self.chain.can_run(len(reqs), not sampling, num_steps)
            key = "chain graph" if ok else f"per step: {reason}"
            self.chain_counts[key] = self.chain_counts.get(key, 0) + 1
            if ok:
                rest = self.chain.replay(toks[0], hidden, [r.row for r in reqs], base)
                return Drafts(torch.cat([toks[0][:, None], rest], dim=1), None)
        for k in range(1, num_steps):
            step = chain_step(self.runner.model, k)
            batch = self.runner.make_batch(
                ForwardMode.DRAFT_DECODE,
                toks[-1],
                [r.row for r in reqs],
                [b + step.offset for b in base],
                [1] * len(reqs),
                logits="last",
                stride=1,
                capture_hidden=CaptureHidden.LAST,
                feature=hidden,
                feature_kind=FeatureKind.DRAFT,
                draft_step=step.key,
            )
            out = self.runner.forward(batch)
            tok, q = self._choose(reqs, out.logits, rows, out.hidden)
            toks.append(tok)
            if q is not None:
                qs.append(q)
            hidden = out.hidden
        tokens = torch.stack(toks, dim=1)
        q_all = torch.stack(qs, dim=1) if sampling and len(qs) == num_steps else None
        return Drafts(tokens, q_all)

    # ---- draft extend ------------------------------------------------------------------
    def after_verify(self, reqs, seq_lens, emitted, accept_len, target_hidden):  # type: ignore[override]
        bsz, ndt = emitted.shape
        dev = self.runner.device
        rows_l = [r.row for r in reqs]
        rows = torch.tensor(rows_l, dtype=torch.long, device=dev)
        off = 1 - self.shift
        if self.draft_extend == "v2":
            # All ndt rows at the fixed stride; row i of request b reads emitted[b, i] (the
            # accepted drafts, then the correction; rows past it are discarded).
            batch = self.runner.make_batch(
                ForwardMode.DRAFT_EXTEND_V2,
                emitted.reshape(-1),
                rows_l,
                [n + ndt - 1 + off for n in seq_lens],
                [ndt] * bsz,
                # The selected rows (device tensor: no sync); the model computes logits and
                # hidden only there (a graph of this phase outputs nothing else).
                logits=torch.arange(bsz, device=dev) * ndt + accept_len.to(dev) - 1,
                stride=ndt,
                capture_hidden=CaptureHidden.LAST,
                feature=target_hidden if self.shift else None, feature_kind=FeatureKind.TARGET,
            )
            out = self.runner.forward(batch)
            self._keep_states(rows, out)
            self._store_next(reqs, rows, out.logits, out.hidden)
            return
        # v1: only the accepted rows, packed (needs the accept lengths on the host).
        acc = accept_len.tolist()
        sel = torch.cat([torch.arange(a, device=dev) + b * ndt for b, a in enumerate(acc)])
        batch = self.runner.make_batch(
            ForwardMode.DRAFT_EXTEND,
            emitted.reshape(-1)[sel],
            rows_l,
            [n + a - 1 + off for n, a in zip(seq_lens, acc)],
            acc,
            logits="last",
            capture_hidden=CaptureHidden.LAST,
            feature=target_hidden[sel] if target_hidden is not None and self.shift else None, feature_kind=FeatureKind.TARGET,
        )
        out = self.runner.forward(batch)
        self._keep_states(rows, out)
        self._store_next(reqs, rows, out.logits, out.hidden)

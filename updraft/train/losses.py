"""Losses of draft-head training over an unrolled forward (``updraft.train.forward.unroll``).

Step ``k`` row ``j`` is trained against target position ``p = j + k + 1`` (its input token is
``t[p]`` and it predicts ``t[p+1]``); rows whose ``p`` is not a training position (prompt,
padding, last token) are left out. Per step:

* EAGLE-1: feature regression ``smooth_l1(out, hidden[p])`` (mean over the hidden dim) with
  weight 1.0, plus token cross-entropy against the target's full distribution
  ``softmax(lm_head(hidden[p]))`` with weight 0.1 (the EAGLE paper's weights);
* EAGLE-3: cross-entropy only, against the target's distribution restricted to the draft
  vocabulary and renormalised; positions whose target argmax lies outside the draft vocabulary
  are left out (the head cannot produce that token).

Steps are weighted ``decay**k`` (0.8, as EAGLE-3's training-time test) and summed. Within a
step, the first ``early_tokens`` training positions of each sequence (an answer's opening: the
engine accepts worst there on prompts unlike the training set's) weigh ``early_weight`` times
the others (1.0: a plain mean). With ``hard_label_weight`` h > 0 the cross-entropy is
``(1 - h) * soft + h * hard``, ``hard`` being the cross-entropy against the target's argmax alone:
the engine's greedy acceptance asks only that the head's argmax match the target's, and the soft
labels spend the head's fit on the rest of the distribution too. With ``feature_noise`` a > 0 the
target feature step 0 reads gets uniform noise ``U(-a, a)`` times its own RMS, per token and per
target layer (EAGLE-3's feature is three layers' hidden states side by side, whose scales differ):
EAGLE's data noise, so the head leans less on a feature the target computed exactly. Only the
training step noises (it passes a generator); held-out estimates and chains read clean features.
The per-step top-1 accuracy (head argmax == target argmax, in target ids) is the acceptance rate of
draft ``k+1`` given drafts ``1..k`` were accepted, which is what the engine measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from updraft.models.eagle import Eagle3Head
from updraft.train.data import TrainBatch
from updraft.train.forward import Head, head_logits, shift_left, unroll

#: ``unroll``'s signature: (head, ids, target feature, steps) -> each step's output features
Unroll = Callable[[Head, torch.Tensor, torch.Tensor, int], list[torch.Tensor]]


@dataclass(frozen=True)
class LossConfig:
    steps: int = 1  # draft steps unrolled (training-time test); 1 = plain EAGLE-1 training
    feature_weight: float = 1.0  # EAGLE-1 regression
    token_weight: float = 0.1  # EAGLE-1 cross-entropy (EAGLE-3 uses 1.0: CE is its only loss)
    step_decay: float = 0.8
    early_weight: float = 1.0  # weight of each sequence's first early_tokens training positions
    early_tokens: int = 128
    hard_label_weight: float = 0.0  # share of the cross-entropy taken against the target's argmax alone
    feature_noise: float = 0.0  # amplitude of the uniform noise on step 0's target feature, in its RMS


def position_weights(target_mask: torch.Tensor, cfg: LossConfig) -> torch.Tensor | None:
    """[B, L] float32: ``early_weight`` at each sequence's first ``early_tokens`` training
    positions (counted along ``target_mask``), 1 elsewhere; None when the weight is 1."""
    if cfg.early_weight == 1.0:
        return None
    index = torch.cumsum(target_mask.to(torch.int64), dim=1) - 1  # training positions before p
    return torch.where(index < cfg.early_tokens, cfg.early_weight, 1.0).to(torch.float32)


def _mean(x: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    return x.mean() if w is None else (w * x).sum() / w.sum()


class TargetHead:
    """The target's LM head as soft labels: full vocabulary (EAGLE-1) or the draft vocabulary
    rows (EAGLE-3), detached."""

    def __init__(self, head: Head) -> None:
        w = head.shared._target[0].lm_head_weight.detach()
        self.eagle3 = isinstance(head, Eagle3Head)
        if isinstance(head, Eagle3Head):
            self.draft_ids = head.vocab_ids().to(w.device)
            self.weight = w[self.draft_ids]
            # target id -> draft column, -1 outside the draft vocabulary
            self.to_draft = torch.full((w.shape[0],), -1, dtype=torch.long, device=w.device)
            self.to_draft[self.draft_ids] = torch.arange(len(self.draft_ids), device=w.device)
            self.in_draft = self.to_draft >= 0
            self.in_draft_host = self.in_draft.cpu()  # for row counts from a batch's host copies
        else:
            self.weight = w
            self.in_draft = None
            self.in_draft_host = None
            self.draft_ids = None
            self.to_draft = None

    def head_index(self, target_ids: torch.Tensor) -> torch.Tensor:
        """Target token ids -> the head's logit columns (the draft vocabulary's index for
        EAGLE-3; callers pass only ids inside it)."""
        return target_ids if self.to_draft is None else self.to_draft[target_ids]

    @torch.no_grad()
    def probs(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.linear(hidden.to(self.weight.dtype), self.weight).float(), dim=-1)


def noised_feature(feature: torch.Tensor, amplitude: float, chunks: int, generator: torch.Generator) -> torch.Tensor:
    """``feature`` [..., chunks * h] plus ``U(-amplitude, amplitude)`` times the RMS of each
    token's chunk (one chunk per target layer), drawn from ``generator`` (on the feature's device)."""
    x = feature.float().unflatten(-1, (chunks, -1))
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    u = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float32) * 2 - 1
    return (x + amplitude * rms * u).flatten(-2).to(feature.dtype)


def _flat_rows(rows: torch.Tensor, n: int) -> torch.Tensor:
    """Flat indices of ``rows``' true entries (row-major, as boolean indexing orders them); ``n``
    is their count, known already, so the GPU is not waited on for it: a stable sort puts the true
    entries first in their order (``nonzero`` would wait for its size)."""
    return torch.sort((~rows.flatten()).to(torch.uint8), stable=True).indices[:n]


def _row_counts(batch: TrainBatch, mask: torch.Tensor, steps: int, labels: TargetHead) -> tuple[int, int, list[int]]:
    """(training positions, rows with soft labels, each step's rows): from the batch's host
    copies when it has them (no wait on the GPU), else read from the device in one transfer.
    Step k's rows are the label rows at positions k + 1 and later (``shift_left``)."""
    base = batch.target_mask
    if batch.host_mask is not None and batch.host_argmax is not None:
        base = mask = batch.host_mask
        if labels.in_draft_host is not None:
            mask = mask & labels.in_draft_host[batch.host_argmax.long()]
    counts = torch.stack([base.sum(), mask.sum(), *(mask[:, k + 1 :].sum() for k in range(steps))]).tolist()
    return int(counts[0]), int(counts[1]), [int(n) for n in counts[2:]]


def _at_rows(x: torch.Tensor, k: int, rows: torch.Tensor, fill: int = 0) -> torch.Tensor:
    """Step ``k``'s targets of ``x`` [B, L, ...] at the flat ``rows`` (position ``j + k + 1`` for row ``j``)."""
    return shift_left(x, k + 1, fill=fill).flatten(0, 1)[rows]


@dataclass
class StepMetrics:
    """A loss's metrics before they are read back: what the host knows already (row counts, and
    the batch's training positions as ``tokens``) and the device values (0-d tensors)."""

    known: dict[str, float]
    pending: dict[str, torch.Tensor]

    def to_host(self, **more: torch.Tensor) -> HostMetrics:
        """Start copying the device values (and ``more``, 0-d tensors on the same device) to host
        memory: on a GPU asynchronously, into pinned memory behind an event."""
        named = self.pending | more
        values = torch.stack([t.detach().float().reshape(()) for t in named.values()]) if named else torch.zeros(0)
        copied = None
        if values.is_cuda:
            host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            host.copy_(values, non_blocking=True)
            values, copied = host, torch.cuda.Event()
            copied.record()
        return HostMetrics(self.known, list(named), values, copied)

    def read(self, **more: torch.Tensor) -> dict[str, float]:
        """Every metric (and ``more``) as python floats, now."""
        return self.to_host(**more).metrics()


@dataclass
class HostMetrics:
    """Metrics on their way to host memory (``StepMetrics.to_host``): ``metrics()`` waits for that
    copy only, not for work queued after it, so a loop that reads step i's metrics after queuing
    step i + 1 keeps the GPU fed."""

    known: dict[str, float]
    names: list[str]
    values: torch.Tensor  # host memory
    copied: torch.cuda.Event | None

    @property
    def positions(self) -> int:
        """Training positions of the batch (known on the host when the step was queued)."""
        return int(self.known["tokens"])

    def metrics(self) -> dict[str, float]:
        if self.copied is not None:
            self.copied.synchronize()
        return self.known | dict(zip(self.names, self.values.tolist()))


def loss_terms(head: Head, batch: TrainBatch, cfg: LossConfig, labels: TargetHead,
               noise: torch.Generator | None = None, forward: Unroll = unroll) -> tuple[torch.Tensor, StepMetrics]:
    """``compute_loss`` without reading its metrics back. The step's row counts come from the
    batch's host copies (``DistillData.batch`` makes them; else from the GPU in one transfer before
    the forward); no op waits on the GPU (boolean indexing would, at each of its ~5 uses per
    unrolled step), so the host queues the forward, backward and optimizer step and moves on."""
    mask = batch.target_mask
    if labels.in_draft is not None:
        mask = mask & labels.in_draft[batch.argmax]
    step_rows = [shift_left(mask, k + 1, fill=False) for k in range(cfg.steps)]
    positions, n_all, ns = _row_counts(batch, mask, cfg.steps, labels)
    # Soft labels once per training position; every step reads its rows from here.
    where = _flat_rows(mask, n_all)
    index = torch.full((mask.numel(),), -1, dtype=torch.long, device=mask.device)
    index[where] = torch.arange(n_all, device=mask.device)
    index = index.view(mask.shape)
    p_all = labels.probs(batch.hidden.flatten(0, 1)[where])
    weights = position_weights(batch.target_mask, cfg)
    feature = batch.head_input()
    if cfg.feature_noise > 0:
        if noise is None:
            raise ValueError("feature_noise > 0 needs the noise generator")
        feature = noised_feature(feature, cfg.feature_noise, feature.shape[-1] // batch.hidden.shape[-1], noise)
    outs = forward(head, batch.ids, feature, cfg.steps)
    total = torch.zeros((), device=mask.device)
    known: dict[str, float] = {"tokens": float(positions)}
    metrics: dict[str, torch.Tensor] = {}
    for k, (out, n) in enumerate(zip(outs, ns)):
        known[f"rows{k}"] = float(n)
        if n == 0:
            continue
        rows = _flat_rows(step_rows[k], n)
        pred = out.flatten(0, 1)[rows]
        logits = head_logits(head, pred).float()
        p = p_all[_at_rows(index, k, rows, fill=-1)]
        w = _at_rows(weights, k, rows) if weights is not None else None
        logp = torch.log_softmax(logits, dim=-1)
        ploss = _mean(-(p * logp).sum(-1), w)
        want = _at_rows(batch.argmax, k, rows)
        closs = ploss
        if cfg.hard_label_weight > 0:
            hloss = _mean(-logp.gather(1, labels.head_index(want)[:, None])[:, 0], w)
            closs = (1 - cfg.hard_label_weight) * ploss + cfg.hard_label_weight * hloss
            metrics[f"hloss{k}"] = hloss.detach()
        step_loss = closs if labels.eagle3 else cfg.token_weight * closs
        if not labels.eagle3:
            tgt = _at_rows(batch.hidden, k, rows)
            vloss = _mean(F.smooth_l1_loss(pred.float(), tgt.float(), reduction="none").mean(-1), w)
            step_loss = step_loss + cfg.feature_weight * vloss
            metrics[f"vloss{k}"] = vloss.detach()
        total = total + (cfg.step_decay**k) * step_loss
        with torch.no_grad():
            top = logits.argmax(-1)
            if labels.draft_ids is not None:
                top = labels.draft_ids[top]
            metrics[f"acc{k}"] = (top == want).float().mean()
            metrics[f"ploss{k}"] = ploss.detach()
    metrics["loss"] = total.detach()
    return total, StepMetrics(known, metrics)


def compute_loss(head: Head, batch: TrainBatch, cfg: LossConfig, labels: TargetHead,
                 noise: torch.Generator | None = None, forward: Unroll = unroll) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted loss over ``cfg.steps`` unrolled steps and per-step metrics (python floats).
    ``noise``: the generator of ``cfg.feature_noise`` (required when it is > 0). ``forward``:
    ``unroll`` or a compiled copy of it (``TrainConfig.compile``)."""
    total, metrics = loss_terms(head, batch, cfg, labels, noise, forward)
    return total, metrics.read()


def expected_accept_length(metrics: dict[str, float], steps: int) -> float:
    """``1 + sum_k prod_{i<=k} acc_i``: the accept length the per-step training accuracies imply
    for a chain of ``steps`` drafts (steps past the unrolled ones reuse the last accuracy)."""
    accs = [metrics.get(f"acc{k}") for k in range(steps)]
    known = [a for a in accs if a is not None]
    if not known:
        return 1.0
    total, run = 1.0, 1.0
    for a in accs:
        run *= a if a is not None else known[-1]
        total += run
    return total


@torch.no_grad()
def chain_steps(head: Head, batch: TrainBatch, steps: int, labels: TargetHead) -> list[tuple[int, int, int]]:
    """The greedy chains of ``steps`` drafts the engine runs along each sequence of ``batch``,
    simulated from the teacher-forced unroll: a verify step at committed length ``N`` (the first
    at prompt + 1) drafts with step ``k`` of head row ``N - 2`` (k = 0..steps-1), accepts the
    leading drafts equal to the sequence's next tokens, and the next step starts at
    ``N + accepted + 1``. In fp32 this is the engine's own sequence of accept lengths
    (tests/train/test_first_draft.py). Returns ``(row, N, drafts accepted)`` per verify step; its
    first draft is token ``N``, from the target's distribution at position ``N - 1``."""
    outs = unroll(head, batch.ids, batch.head_input(), steps)
    hits = []
    for k, out in enumerate(outs):
        top = head_logits(head, out).argmax(-1)
        if labels.draft_ids is not None:
            top = labels.draft_ids[top]
        hits.append((top == shift_left(batch.ids, k + 2, fill=-1)).tolist())
    walk = []
    for b, mask in enumerate(batch.target_mask.tolist()):
        if True not in mask:
            continue
        first, n = mask.index(True), len(mask) - mask[::-1].index(True) + 1  # prompt length - 1, sequence length
        pos = first + 2  # committed length N of the first verify step
        while pos < n:
            m = 0
            while m < steps and pos + m < n and hits[m][b][pos - 2]:
                m += 1
            walk.append((b, pos, m))
            pos += m + 1
    return walk


def chain_acceptance(head: Head, batch: TrainBatch, steps: int, labels: TargetHead) -> tuple[int, list[int]]:
    """``chain_steps`` summed: (verify steps, drafts accepted per chain position). Unlike the
    per-step accuracies over all positions, it counts only the positions where verify steps
    start -- right after a rejection, the harder ones."""
    walk = chain_steps(head, batch, steps, labels)
    return len(walk), [sum(m > k for _, _, m in walk) for k in range(steps)]

"""The draft side of the fused iteration (``updraft.spec.fused``): the draft model's runner, head
and stored per-row feature, and how a draft token is chosen from the draft's logits (greedy,
context-vocabulary or sampled picks, mapped to target ids), inside the captured body."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from updraft.models.eagle import Eagle3Head, EagleHead, draft_to_target
from updraft.models.llama import ModelOutput, RowScale
from updraft.models.mtp import MtpHead
from updraft.runtime import row_state as rs
from updraft.runtime.model_runner import ModelRunner
from updraft.spec import head_pick, rejection_kernels, sampling_kernels
from updraft.spec.head_pick import HeadPick, HeadRows
from updraft.spec.proposers import DraftModelProposer
from updraft.spec.row_io import RowNorm

#: Sampled drafts choose among the draft's best this-many tokens (see ``Drafter.choose``).
DRAFT_CANDIDATES = 64


@dataclass
class RowParams:
    """The batch's rows of ``RowState.sampling`` ([B, NUM_SAMPLING]), one gather per sampled
    iteration; the kernels read its columns in place (see ``row_state`` for what each column
    holds)."""

    table: torch.Tensor

    def col(self, c: int) -> torch.Tensor:
        return self.table[:, c]


@dataclass
class Drafter:
    """The draft side of the iteration: the draft's runner and head, and the proposer's per-row
    draft feature."""

    runner: ModelRunner
    head: EagleHead | Eagle3Head | MtpHead
    next_hidden: torch.Tensor  # [rows, hidden]: each row's draft feature (the proposer's)
    to_target: Callable[[torch.Tensor], torch.Tensor] | None  # draft ids -> target ids (EAGLE-3, token map)
    #: the same map as a table for ``sampling_kernels.argmax_rows``: (d2t, add) or (hot_ids, direct)
    target_table: tuple[torch.Tensor, bool] | None = None
    #: greedy picks with the rows' context tokens competing (``ContextVocab.pick``), or None
    context_pick: Callable[..., torch.Tensor] | None = None
    #: the norm before the head's LM head at the first draft (``read_rows`` applies it), or None
    first_norm: RowNorm | None = None
    #: picks straight from the LM head's input rows (``HeadRows``), or None: greedy, the head's
    #: argmax without its logits (an EAGLE-3 head whose width ``head_pick.fits``)
    head_pick: HeadPick | None = None

    @classmethod
    def of(cls, proposer: DraftModelProposer, max_rows: int) -> Drafter:
        """``max_rows``: the most rows a draft step takes (the largest captured batch)."""
        head = proposer.runner.model
        if proposer.next_hidden is None or not isinstance(head, EagleHead | Eagle3Head | MtpHead):
            raise ValueError("the fused iteration needs an EAGLE or MTP head with a stored draft feature")
        table = ((head.d2t, True) if isinstance(head, Eagle3Head)
                 else (head.hot_ids, False) if isinstance(head, EagleHead) and head.hot_ids is not None else None)
        pick = proposer.context.pick if proposer.context is not None else None
        norm = (RowNorm(head.first_norm.weight, head.first_norm.eps) if isinstance(head, Eagle3Head | MtpHead)
                else None)
        hp = (HeadPick(min(max_rows, head_pick.MAX_ROWS), proposer.runner.device)
              if isinstance(head, Eagle3Head) and head_pick.fits(head.config.hidden_size, 1) else None)
        return cls(proposer.runner, head, proposer.next_hidden, draft_to_target(head), table, pick, norm, hp)

    def picks_rows(self, bs: int) -> bool:
        """Whether a draft step over ``bs`` rows may hand ``choose`` the LM head's input rows
        (``HeadRows``) in place of logits."""
        return (self.head_pick is not None and self.takes_locks and bs <= self.head_pick.slot.shape[0]
                and isinstance(self.head, Eagle3Head) and self.head.lm_head_fp8 is None)

    @property
    def takes_locks(self) -> bool:
        """Whether greedy picks take a lock (``choose``): not where context tokens compete."""
        return self.context_pick is None

    def first_head(self, feat: torch.Tensor, normed: torch.Tensor | None, rows: bool) -> torch.Tensor | HeadRows:
        """The first draft's LM head over the stored features ``feat`` (``normed``: their first
        norm, where ``read_rows`` applied it), as ``choose`` takes it: ``HeadRows`` (``rows``:
        ``picks_rows``) or logits in the draft's dtype."""
        head = self.head
        if rows:
            assert isinstance(head, Eagle3Head)
            return HeadRows(normed if normed is not None else head.first_norm(feat), head.lm_head.weight)
        return (head.logits_from_normed(normed, fp32=False) if normed is not None
                else head.logits_from_feature(feat, fp32=False))

    def head_of(self, out: ModelOutput) -> torch.Tensor | HeadRows:
        """A draft step's output as ``choose`` takes it: its logits, or ``HeadRows`` where the
        forward returned the LM head's input rows (``ForwardBatch.head_rows``)."""
        if out.head_rows is not None:
            assert isinstance(self.head, Eagle3Head)
            return HeadRows(out.head_rows, self.head.lm_head.weight)
        assert out.logits is not None
        return out.logits

    def choose(self, logits: torch.Tensor | HeadRows, prm: RowParams | None, u: torch.Tensor | None,
               out: tuple[torch.Tensor, torch.Tensor] | None, dst: torch.Tensor, scale: RowScale | None = None,
               context: tuple[torch.Tensor, torch.Tensor] | None = None, lock: torch.Tensor | None = None) -> None:
        """Draft token (target ids) from draft logits, written into ``dst`` [B] (its column of
        the verify block's ids). Sampled, the distribution q it came from lands in ``out``:
        (probabilities [B, K], candidate ids in the target vocabulary [B, K]), one draft step's
        slices of what the acceptance reads. ``scale``: the logits lack each row's positive
        factor (``ModelOutput.row_scale``): the argmax and the top-k are the same without it,
        and ``choose`` applies it to the candidates.

        Sampled drafts draw from the request's temperature / top-k / top-p / min-p applied to the
        draft's top ``K = DRAFT_CANDIDATES`` tokens only: rejection sampling is lossless for ANY
        q as long as it is the q the draft was drawn from, and this q costs one top-k instead of
        a sort of the whole vocabulary per draft step (``sampling_kernels.topk_rows`` on draft
        vocabularies up to ``MAX_TOPK_ROW``). Greedy rows keep only the best candidate.
        The candidates are mapped to target ids once; q, the draw and the picked id are one
        kernel (``sampling_kernels.choose``). (A kernel doing the top-k and this choice in one
        launch measured 13.3 us against 12.4 for the pair on the H100, 2026-11-26: the choice's
        reductions over 64 candidates ran at the top-k's 16 warps.) ``context``: (pre-norm
        features, request rows) of greedy rows whose context tokens compete (``ContextVocab.pick``:
        one launch in place of the argmax's). ``lock`` [B] (greedy, ``takes_locks``): rows where
        it is >= 0 take it as their draft (the lookup assist's, ``DeviceNgram.locks``).
        ``HeadRows`` in place of logits (``picks_rows``): greedy, the head's argmax without the
        logits (``HeadPick``); sampled, the logits from the same launch (``head_logits``)."""
        table = self.target_table
        if isinstance(logits, HeadRows):
            if self.head_pick is None or not self.takes_locks:
                raise ValueError("Drafter.choose: LM head rows are for picks without context tokens")
            if prm is None or u is None or out is None:
                self.head_pick(logits, table, dst, lock)
                return
            logits = head_pick.head_logits(logits)  # sampled: the top-k reads the logits
        # one launch maps draft ids to target ids where the map is a table (or there is none)
        mapped = table is not None or self.to_target is None  # the kernel can map draft ids to target ids
        in_kernel = logits.shape[-1] <= sampling_kernels.MAX_TOPK_ROW and mapped
        if prm is None or u is None or out is None:
            if lock is not None and not self.takes_locks:
                raise ValueError("Drafter.choose: context-token picks take no lock")
            if self.context_pick is not None and context is not None:
                self.context_pick(logits, context[0], context[1], dst, unscaled=scale is not None)
            elif mapped:
                sampling_kernels.argmax_rows(logits, table, out=dst, lock=lock)
            else:  # a map the kernel cannot apply: torch ops, then one copy
                assert self.to_target is not None
                ids = self.to_target(sampling_kernels.argmax_rows(logits))
                dst.copy_(ids if lock is None else torch.where(lock >= 0, lock, ids))
            return
        if lock is not None:
            raise ValueError("Drafter.choose: sampled picks take no lock (their q is one-hot at a lookup)")
        # Best first either way: choose applies top-k / top-p over the candidates in this order.
        # The top-k kernel follows the acceptance kernels' dispatch (the interpreter when tests ask:
        # ~15 ms a row, so CPU engine runs keep torch's topk), on CUDA unless TOPK_ON_CUDA is off.
        k = out[0].shape[1]
        use = rejection_kernels.use_kernels(logits) and (logits.device.type != "cuda" or sampling_kernels.TOPK_ON_CUDA)
        if in_kernel and use:  # one kernel where torch's topk runs two, and the map to target ids in it
            vals, cand = sampling_kernels.topk_rows(logits, k, target=table)
        else:
            vals, cand = logits.topk(k, dim=-1)
            vals = vals.float()
            if self.to_target:
                cand = self.to_target(cand)
        sampling_kernels.choose(vals, prm.col(rs.TEMP_EFF), prm.col(rs.TOP_K_EFF), prm.col(rs.TOP_P_EFF),
                                prm.col(rs.MIN_P), u, ids=cand, out=out, pick_out=dst, row_scale=scale)

"""The draft extend's last accepted row of each request, picked in ONE launch after the verify's
argmax or acceptance (``pick_last_rows``; greedy, inside the argmax's own launch:
``argmax_and_pick``): the inputs of a one-row-a-request draft extend.

A one-layer EAGLE-3 head's draft extend over the verify block computes, per request ``b`` with
``N`` committed tokens and ``a`` accepted (``a - 1`` drafts kept, then the target's own token),
the K/V of rows ``i = 0 .. a - 1`` at positions ``N - 1 + i`` and the output feature of row
``a - 1`` alone (the next iteration's first draft reads it; the other rows' outputs are never
read). Row ``i``'s K/V depends only on its feature (the verify's at ``N - 1 + i``) and its token:
for ``i < a - 1`` that token is draft ``d_{i+1}``, known before the verify ends, so the fused
iteration stores those rows' K/V beside the verify's last layers (``FusedIteration.
extend_rows_beside``). What is left after the argmax is row ``a - 1`` (the target's token) alone:
a DRAFT_DECODE forward of one row a request, whose inputs this kernel writes:

* ``ids[b] = emitted[b, a - 1]``, ``positions[b] = ext_positions[src]``, ``out_cache_loc[b] =
  ext_loc[src]`` and ``seq_lens[b] = N + a - 1`` (keys at ``0 .. N - 1 + a - 1``), where
  ``src = b * (S + 1) + a - 1`` is the row in the extend's layout;
* the row's feature ``feat[src]`` and its QKV product ``qkv[src]`` (``eagle3_feature_qkv``).

``a``: greedy, one plus the number of leading drafts equal to the target's picks (as ``commit``);
sampled, given (the rejection kernel's).

Hazards: rows are not bounds-checked; ``accept`` must be in ``1..S + 1``. The padding requests
(row 0) pick like any other; their K/V goes to the scratch slot their layout holds.

Dispatch (as ``updraft.spec.sampling_kernels``): the kernel on CUDA tensors and, for tests, on
CPU tensors under the Triton interpreter; otherwise the torch code, which is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from updraft.batch import ForwardBatch
from updraft.ops.triton_utils import num_warps, pdl_enter, pdl_opts
from updraft.spec.commit import kept_drafts
from updraft.spec.sampling_kernels import (
    ARGMAX_PER_THREAD,
    MAX_TOPK_ROW,
    argmax_rows,
    row_argmax,
    use_triton,
)
from updraft.spec.verify import greedy_accept


@dataclass(frozen=True)
class ExtendRows:
    """The draft extend over the verify block, as ``pick_last_rows`` reads it: ``emitted`` [B, S + 1]
    (the target's picks or the sampled tokens), ``drafts`` [B, S] (greedy's acceptance; any
    strides along B), ``accept`` [B] (sampled) or None (greedy), the extend's ``positions`` /
    ``out_cache_loc`` [B * (S + 1)], its input ``feat`` [B * (S + 1), H] and that feature's QKV
    product ``qkv`` [B * (S + 1), Q] float32, and ``n`` [B]: each request's committed length."""

    emitted: torch.Tensor
    drafts: torch.Tensor
    accept: torch.Tensor | None
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    feat: torch.Tensor
    qkv: torch.Tensor
    n: torch.Tensor


@triton.jit
def pick_at(b, k, tok, ndt, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos, Loc, SeqLen, FeatOut, s_fo, QkvOut, s_qo,
            H, Q, BLOCK_H: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Request ``b``'s row ``k`` (accept length - 1; its token ``tok``, the emitted one there) into
    the one-row batch (the module docstring); ``ndt`` = S + 1 (any int). ``LastRowPick.args``
    passes the pointers from ``N`` on."""
    src = b * ndt + k
    tl.store(Ids + b, tok)
    tl.store(Pos + b, tl.load(ExtPos + src))
    tl.store(Loc + b, tl.load(ExtLoc + src))
    tl.store(SeqLen + b, (tl.load(N + b) + k).to(SeqLen.dtype.element_ty))
    h = tl.arange(0, BLOCK_H)
    hm = h < H
    tl.store(FeatOut + b * s_fo + h, tl.load(Feat + src * s_f + h, mask=hm, other=0.0), mask=hm)
    q = tl.arange(0, BLOCK_Q)
    qm = q < Q
    tl.store(QkvOut + b * s_qo + q, tl.load(Qkv + src * s_q + q, mask=qm, other=0.0), mask=qm)


@triton.jit
def _pick_row(b, Emitted, s_e, Drafts, s_d, AcceptIn, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos, Loc, SeqLen,
              FeatOut, s_fo, QkvOut, s_qo, H, Q, NDT: tl.constexpr, BLOCK_T: tl.constexpr, GREEDY: tl.constexpr,
              BLOCK_H: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Request ``b``'s last accepted row into the one-row batch (the module docstring)."""
    t = tl.arange(0, BLOCK_T)
    e = tl.load(Emitted + b * s_e + t, mask=t < NDT, other=0)
    if GREEDY:
        k = kept_drafts(Drafts, s_d, b, e, t, NDT)
    else:
        k = tl.load(AcceptIn + b).to(tl.int64) - 1
    pick_at(b, k, tl.sum(tl.where(t == k, e, 0), axis=0), NDT, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos, Loc,
            SeqLen, FeatOut, s_fo, QkvOut, s_qo, H, Q, BLOCK_H, BLOCK_Q)


@triton.jit
def _pick_kernel(Emitted, s_e, Drafts, s_d, AcceptIn, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos, Loc, SeqLen,
                 FeatOut, s_fo, QkvOut, s_qo, H, Q, NDT: tl.constexpr, BLOCK_T: tl.constexpr, GREEDY: tl.constexpr,
                 BLOCK_H: tl.constexpr, BLOCK_Q: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    _pick_row(tl.program_id(0), Emitted, s_e, Drafts, s_d, AcceptIn, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos,
              Loc, SeqLen, FeatOut, s_fo, QkvOut, s_qo, H, Q, NDT, BLOCK_T, GREEDY, BLOCK_H, BLOCK_Q)


@triton.jit
def _argmax_pick_kernel(X, s_x, V, Tickets, Emitted, Drafts, s_d, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos,
                        Loc, SeqLen, FeatOut, s_fo, QkvOut, s_qo, H, Q, BLOCK: tl.constexpr, NDT: tl.constexpr,
                        BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_Q: tl.constexpr, PDL: tl.constexpr):
    """One program per verify row: its argmax (``argmax_rows``'s) into ``Emitted`` (rows
    contiguous); then the last of a request's rows to finish (an atomic ticket per request, left
    at 0) picks that request's last accepted row (``_pick_row``, greedy)."""
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)
    _, arg = row_argmax(X + row * s_x, V, BLOCK)
    tl.store(Emitted + row, arg)
    b = row // NDT
    tl.debug_barrier()  # every thread's store issued before the ticket releases it
    ticket = tl.atomic_add(Tickets + b, 1, sem="acq_rel")
    if ticket == NDT - 1:
        _pick_row(b, Emitted, NDT, Drafts, s_d, N, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos, Loc, SeqLen,
                  FeatOut, s_fo, QkvOut, s_qo, H, Q, NDT, BLOCK_T, True, BLOCK_H, BLOCK_Q)
        tl.atomic_xchg(Tickets + b, 0)  # ready for the next launch (stream order publishes it)


def _pick_torch(src: ExtendRows, dst: ForwardBatch, feat_out: torch.Tensor, qkv_out: torch.Tensor) -> None:
    """The reference (and the CPU path)."""
    bs, ndt = src.emitted.shape
    accept = src.accept if src.accept is not None else greedy_accept(src.drafts, src.emitted)[0]
    k = accept.long() - 1
    ar = torch.arange(bs, device=k.device)
    row = ar * ndt + k
    dst.input_ids.copy_(src.emitted[ar, k])
    dst.positions.copy_(src.positions[row])
    dst.out_cache_loc.copy_(src.out_cache_loc[row])
    dst.seq_lens.copy_((src.n + k).to(dst.seq_lens.dtype))
    feat_out.copy_(src.feat[row])
    qkv_out.copy_(src.qkv[row])


@dataclass(frozen=True)
class LastRowPick:
    """Where a pick of ``src``'s last accepted rows lands: ``dst`` (a DRAFT_DECODE batch of one row a
    request, rows contiguous: its ``input_ids``, ``positions``, ``out_cache_loc``, ``seq_lens``) and
    the rows' feature [B, H] and QKV product [B, Q] (``outputs``, new tensors: the forward's
    ``feature`` and ``feature_qkv``). A launch that knows the accept lengths writes it through
    ``pick_at`` (``args``, ``consts``): this module's, or the sampled acceptance's
    (``accept_kernel.rejection_sample``)."""

    src: ExtendRows
    dst: ForwardBatch
    feat_out: torch.Tensor
    qkv_out: torch.Tensor

    @classmethod
    def of(cls, src: ExtendRows, dst: ForwardBatch) -> LastRowPick:
        bs = src.emitted.shape[0]
        if dst.batch_size != bs or dst.num_tokens != bs:
            raise ValueError(f"pick_last_rows: the batch must hold one row for each of {bs} requests, "
                             f"got {dst.num_tokens} rows for {dst.batch_size}")
        return cls(src, dst, torch.empty(bs, src.feat.shape[1], dtype=src.feat.dtype, device=src.feat.device),
                   torch.empty(bs, src.qkv.shape[1], dtype=src.qkv.dtype, device=src.qkv.device))

    @property
    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.feat_out, self.qkv_out

    def args(self) -> tuple:
        """``pick_at``'s pointers and sizes from ``N`` on."""
        src, dst = self.src, self.dst
        return (src.n, src.positions, src.out_cache_loc, src.feat, src.feat.stride(0), src.qkv, src.qkv.stride(0),
                dst.input_ids, dst.positions, dst.out_cache_loc, dst.seq_lens, self.feat_out, self.feat_out.stride(0),
                self.qkv_out, self.qkv_out.stride(0), self.feat_out.shape[1], self.qkv_out.shape[1])

    def consts(self) -> dict[str, int]:
        return {"BLOCK_H": triton.next_power_of_2(self.src.feat.shape[1]),
                "BLOCK_Q": triton.next_power_of_2(self.src.qkv.shape[1])}

    def require_reads(self, emitted_out: torch.Tensor | None, caller: str) -> None:
        """A launch that emits into ``emitted_out`` and picks must pick from those tokens."""
        if emitted_out is None or self.src.emitted.data_ptr() != emitted_out.data_ptr():
            raise ValueError(f"{caller}: the pick reads the emitted tokens: pass its src.emitted as emitted_out")

    @staticmethod
    def absent(like: torch.Tensor) -> tuple[tuple, dict[str, int]]:
        """``args`` and ``consts`` for a launch that makes no pick: ``like``'s pointer in every
        pointer's place (never read) and zero sizes."""
        t = like
        return (t, t, t, t, 0, t, 0, t, t, t, t, t, 0, t, 0, 0, 0), {"BLOCK_H": 1, "BLOCK_Q": 1}

    def by_torch(self, accept: torch.Tensor | None = None) -> None:
        """The pick by torch ops (the reference, and the path where the kernels do not run);
        ``accept`` [B]: the lengths where ``src`` has none (the sampled acceptance's)."""
        src = self.src if accept is None else replace(self.src, accept=accept)
        _pick_torch(src, self.dst, self.feat_out, self.qkv_out)


def pick_last_rows(src: ExtendRows, dst: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Write ``dst`` (a DRAFT_DECODE batch of one row a request, rows contiguous) from each
    request's last accepted row of ``src`` (see the module docstring): its ``input_ids``,
    ``positions``, ``out_cache_loc`` and ``seq_lens`` in place; returns that row's feature [B, H]
    and QKV product [B, Q] (new tensors, the forward's ``feature`` and ``feature_qkv``)."""
    bs, ndt = src.emitted.shape
    pick = LastRowPick.of(src, dst)
    if not use_triton(src.emitted) or bs == 0:
        pick.by_torch()
        return pick.outputs
    emitted = src.emitted if src.emitted.stride(1) == 1 else src.emitted.contiguous()
    drafts = src.drafts if ndt == 1 or src.drafts.stride(1) == 1 else src.drafts.contiguous()
    n, *rest = pick.args()
    _pick_kernel[(bs,)](
        emitted, emitted.stride(0), drafts, drafts.stride(0), src.accept if src.accept is not None else src.n, n,
        *rest, NDT=ndt, BLOCK_T=triton.next_power_of_2(ndt), GREEDY=src.accept is None, **pick.consts(), num_warps=4,
        **pdl_opts(src.emitted.device, "sampling"),
    )
    return pick.outputs


def argmax_and_pick(logits: torch.Tensor, src: ExtendRows, dst: ForwardBatch,
                    tickets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy: the verify's argmax of ``logits`` [B * (S + 1), V] into ``src.emitted`` (rows
    contiguous) and ``pick_last_rows(src, dst)``, in ONE launch where Triton runs: the last of a
    request's programs to finish picks (``tickets``: int32, at least B, all 0; left at 0).
    Elsewhere the argmax, then ``pick_last_rows``. H100, SmolLM2's S = 5 cycle (2026-12-06,
    benchmarks/results/2026-12-06-h100-extend-rows): the pick ends ~3.5 us after the argmax as
    a launch of its own and as this ticket alike in the profile (the two within the spread in
    replays); every program loading the candidate rows before its argmax lost 4.7 / 6.1 us a
    cycle (bs 1 / 8), one program a request over all its rows (no ticket) 25 / 27 us."""
    bs, ndt = src.emitted.shape
    if src.accept is not None:
        raise ValueError("argmax_and_pick: greedy only (a sampled acceptance's lengths come from its own launch)")
    if tickets.shape[0] < bs or tickets.dtype != torch.int32:
        raise ValueError(f"argmax_and_pick: tickets must be int32 [>= {bs}], got {tickets.dtype} {list(tickets.shape)}")
    if not use_triton(logits) or logits.stride(1) != 1 or not src.emitted.is_contiguous() or bs == 0:
        argmax_rows(logits, out=src.emitted.view(-1))
        return pick_last_rows(src, dst)
    pick = LastRowPick.of(src, dst)
    drafts = src.drafts if ndt == 1 or src.drafts.stride(1) == 1 else src.drafts.contiguous()
    v = logits.shape[1]
    block = min(triton.next_power_of_2(v), MAX_TOPK_ROW)
    _argmax_pick_kernel[(bs * ndt,)](
        logits, logits.stride(0), v, tickets, src.emitted, drafts, drafts.stride(0), *pick.args(),
        BLOCK=block, NDT=ndt, BLOCK_T=triton.next_power_of_2(ndt), **pick.consts(),
        num_warps=num_warps(block, per_thread=ARGMAX_PER_THREAD), **pdl_opts(logits.device, "sampling"),
    )
    return pick.outputs

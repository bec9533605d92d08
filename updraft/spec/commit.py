"""The end of a fused iteration in one launch: the accept lengths, the rows' device state, the
output block and the next draft feature.

Per request ``b`` (table row ``rows[b]``, ``n[b]`` committed tokens before the iteration):

* ``accept[b]``: greedy, one plus the number of leading drafts equal to the target's picks
  (``verify.greedy_accept``); sampled, given (the rejection kernel's);
* ``out[b] = [accept, emitted[b, 0..S]]`` (what the host reads one iteration later);
* ``seq_len[row] = n + accept``, ``bonus[row] = emitted[b, accept - 1]``, ``offset[row] += 1``
  (the RNG counter: one draw per iteration);
* with a draft feature: ``next_hidden[row] = hidden[b * (S + 1) + accept - 1]`` (the draft
  extend's row for the last accepted token), or ``hidden[b]`` where the extend ran that row
  alone (``hidden`` [B, H]: ``updraft.spec.last_row``);
* row 0, the padding row, back to its padding values (``RowState.reset_padding``; the padded
  requests, all on row 0, write nothing);
* with token histories (a ``DeviceNgram``, n-gram lookups): ``emitted[b]`` appended at positions
  ``n .. n + S`` of row ``rows[b]`` (``DeviceNgram.append``, the reference: those past
  ``n + accept - 1`` are junk beyond the new length; padded requests write row 0).

Inside a CUDA graph every torch op is a kernel node: the torch version below is ~20 of them at
S = 5 (the greedy acceptance's compare / cumprod / sum, the gathers and scatters, the padding
fills, the output copies), each a few us of a latency-bound iteration; this kernel is one.

Dispatch (as ``updraft.spec.sampling_kernels``): the kernel on CUDA tensors and, for tests, on CPU
tensors under the Triton interpreter; otherwise the torch code, which is the reference.
Hazards: rows and accept lengths are not bounds-checked; ``accept`` must be in ``1..S + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import pdl_enter, pdl_opts
from updraft.runtime.row_state import RowState
from updraft.spec.sampling_kernels import use_triton
from updraft.spec.verify import greedy_accept

if TYPE_CHECKING:
    from updraft.spec.ngram_device import DeviceNgram


@dataclass
class Commit:
    """One iteration's results for ``commit``: ``emitted`` [B, S + 1] (the target's picks, or the
    sampled tokens), ``drafts`` [B, S] (read for the greedy acceptance; may be a strided view),
    ``accept`` [B] (sampled) or None (greedy), ``hidden`` [B * (S + 1), H] (the draft extend's
    output), or [B, H] (its last accepted row of each request, run alone), with ``next_hidden``
    [rows, H] (the proposer's per-row feature), or both None;
    ``layer_states`` [B * (S + 1), ...]: an MTP head's per-module states of the draft extend, which
    the caller keeps at the accepted rows (``MtpHead.keep_layer_states``), not ``commit``."""

    emitted: torch.Tensor
    drafts: torch.Tensor
    accept: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    next_hidden: torch.Tensor | None = None
    layer_states: torch.Tensor | None = None


@triton.jit
def kept_drafts(Drafts, s_d, b, e, t, NDT: tl.constexpr):
    """Greedy: how many of request ``b``'s S = NDT - 1 drafts (``Drafts + b * s_d``) lead the
    target's picks ``e`` (loaded at ``t``) unchanged: the first that differs ends the accepted
    prefix (int64; the accept length minus one, ``verify.greedy_accept``'s rule)."""
    d = tl.load(Drafts + b * s_d + t, mask=t < NDT - 1, other=0)
    miss = (d != e) & (t < NDT - 1)
    return tl.min(tl.where(miss, t, NDT - 1), axis=0).to(tl.int64)


@triton.jit
def _commit_kernel(Rows, N, Drafts, s_d, Emitted, s_e, AcceptIn, Out, s_o, SeqLen, Bonus, Offset, s_off,
                   Hidden, s_h, NextHidden, s_nh, H, Hist, s_hist, HIST_COLS, NDT: tl.constexpr, BLOCK_T: tl.constexpr,
                   GREEDY: tl.constexpr, HIDDEN: tl.constexpr, ONE_ROW: tl.constexpr, BLOCK_H: tl.constexpr,
                   HIST: tl.constexpr, HIST_PAD: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    b = tl.program_id(0)
    t = tl.arange(0, BLOCK_T)
    tm = t < NDT
    e = tl.load(Emitted + b * s_e + t, mask=tm, other=0)
    if HIST:  # positions n .. n + S of the row's history (clamped to its width, as ``append``)
        col = tl.minimum(HIST_PAD + tl.load(N + b) + t, HIST_COLS - 1)
        tl.store(Hist + tl.load(Rows + b).to(tl.int64) * s_hist + col, e.to(Hist.dtype.element_ty), mask=tm)
    if GREEDY:
        acc = kept_drafts(Drafts, s_d, b, e, t, NDT) + 1
    else:
        acc = tl.load(AcceptIn + b).to(tl.int64)
    tl.store(Out + b * s_o, acc)
    tl.store(Out + b * s_o + 1 + t, e, mask=tm)
    h = tl.arange(0, BLOCK_H)
    hm = h < H
    row = tl.load(Rows + b).to(tl.int64)
    if row != 0:  # padded requests share row 0: none of them writes it
        tl.store(SeqLen + row, tl.load(N + b) + acc)
        tl.store(Bonus + row, tl.sum(tl.where(t == acc - 1, e, 0), axis=0))
        tl.store(Offset + row * s_off, tl.load(Offset + row * s_off) + 1)
        if HIDDEN:
            src_row = b if ONE_ROW else b * NDT + acc - 1
            src = tl.load(Hidden + src_row * s_h + h, mask=hm, other=0.0)
            tl.store(NextHidden + row * s_nh + h, src.to(NextHidden.dtype.element_ty), mask=hm)
    if b == 0:  # the padding row's values (RowState.reset_padding)
        tl.store(SeqLen, 1)
        tl.store(Bonus, 0)
        tl.store(Offset, 0)
        if HIDDEN:
            tl.store(NextHidden + h, tl.zeros([BLOCK_H], NextHidden.dtype.element_ty), mask=hm)


def commit_torch(out: torch.Tensor, rows: torch.Tensor, n: torch.Tensor, res: Commit, state: RowState,
                 history: DeviceNgram | None = None) -> torch.Tensor:
    """The reference (and the CPU path); returns the accept lengths [B]."""
    accept = res.accept if res.accept is not None else greedy_accept(res.drafts, res.emitted)[0]
    bs = rows.shape[0]
    ar = torch.arange(bs, device=rows.device)
    if history is not None:
        history.append(rows, n, res.emitted)
    state.seq_len[rows] = n + accept
    state.bonus[rows] = res.emitted[ar, accept - 1]
    state.offset[rows] = state.offset[rows] + 1
    if res.hidden is not None and res.next_hidden is not None:
        picked = res.hidden if res.hidden.shape[0] == bs else res.hidden.view(bs, res.emitted.shape[1], -1)[ar, accept - 1]
        res.next_hidden[rows] = picked.to(res.next_hidden.dtype)
        res.next_hidden[:1].zero_()
    state.reset_padding()
    out[:, 0].copy_(accept)
    out[:, 1:].copy_(res.emitted)
    return out[:, 0]


def commit(out: torch.Tensor, rows: torch.Tensor, n: torch.Tensor, res: Commit, state: RowState,
           history: DeviceNgram | None = None) -> torch.Tensor:
    """Write the iteration's results (see the module docstring) into ``out`` [B, S + 2], the row
    state and, given, the rows' token ``history``; returns the accept lengths [B] (a view of
    ``out``)."""
    bs, ndt = res.emitted.shape
    hidden = res.hidden is not None and res.next_hidden is not None
    if not use_triton(rows) or bs == 0:
        return commit_torch(out, rows, n, res, state, history)
    emitted = res.emitted if res.emitted.stride(1) == 1 else res.emitted.contiguous()
    drafts = res.drafts if ndt == 1 or res.drafts.stride(1) == 1 else res.drafts.contiguous()
    h = res.hidden if hidden else out
    nh = res.next_hidden if hidden else out
    width = int(h.shape[-1]) if hidden else 1
    offset = state.offset
    hist = history.hist if history is not None else out
    _commit_kernel[(bs,)](
        rows, n, drafts, drafts.stride(0), emitted, emitted.stride(0),
        res.accept if res.accept is not None else out, out, out.stride(0), state.seq_len, state.bonus,
        offset, offset.stride(0), h, h.stride(0), nh, nh.stride(0), width, hist, hist.stride(0), hist.shape[1],
        NDT=ndt, BLOCK_T=triton.next_power_of_2(ndt), GREEDY=res.accept is None, HIDDEN=hidden,
        ONE_ROW=hidden and h.shape[0] == bs,
        BLOCK_H=triton.next_power_of_2(width), HIST=history is not None,
        HIST_PAD=history.pad if history is not None else 0,
        num_warps=1 if width <= 1024 else 4,
        **pdl_opts(rows.device, "sampling"),
    )
    return out[:, 0]

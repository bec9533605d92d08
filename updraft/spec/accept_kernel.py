"""Triton: the acceptance step of lossless rejection sampling (``rejection_kernels`` describes the
target's filtered distribution per verify row; this kernel reads those statistics).

``rejection_sample`` walks the drafts: accept ``d_k`` iff ``u_k * max(q_k(d_k), 1e-20) <=
p_k(d_k)``; at the first rejection it draws the correction from ``max(p_k - q_k, 0)`` (``q_k``
sparse: the draft's candidates), after ``S`` acceptances the bonus from ``p_S``, by inverse CDF
in vocabulary order with the given uniform, as ``device_rng.inverse_cdf`` does. The residual is
summed in integer units of ``2**-44`` (every sum exact, so the block, sub-block and token levels
of the search agree and the draw always lands on a positive residual, whichever program added
which block; each probability loses less than ``2**-44`` to the truncation). Grid: a program per
request and vocabulary block of 4096 tokens; each walks the drafts (cheap), sums its block of the
residual, and the last of the request's programs to finish (an atomic ticket) searches the block
sums, then one block. The walk tests all ``S`` drafts at once, so its loads do not wait on each
other. (One program per request, walking the drafts one after another and then the whole row
once or twice, took 25 us of a SmolLM2 sampled S = 5 cycle at bs 1 on the H100; this launch
12 us, 2026-11-27.)

Dispatch: ``rejection_kernels.sampled_accept`` (the kernels on CUDA, or under the interpreter when
tests ask; else its dense reference).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import pdl_enter, pdl_opts
from updraft.runtime.sampler import GREEDY_TEMPERATURE
from updraft.spec import filter_hist
from updraft.spec.last_row import LastRowPick, pick_at

#: The residual search: a block of ``_NSUB x _SUB`` tokens (each program sums one block).
_NSUB = 64
_SUB = 64


@triton.jit
def _prob(Row, St, tok, valid, c, greedy):
    """p(tok) of a row from its statistics (``tok`` a scalar or a vector; 0 where not valid)."""
    x = tl.load(Row + tok, mask=valid, other=float("-inf")).to(tl.float32)
    x = tl.where(tl.load(St + 4) > 0, 0.0, x)  # a bad row reads as zeros (invalid: 0 below)
    e = tl.where(x >= tl.load(St + 1), tl.exp2((x - tl.load(St + 0)) * c), 0.0)
    p = e * tl.math.div_rn(1.0, tl.load(St + 2))
    one = (tok == tl.load(St + 3).to(tl.int64)).to(tl.float32)
    return tl.where(valid, tl.where(greedy, one, p), 0.0)


@triton.jit
def _units(p):
    """Probabilities in integer units of 2**-44 (truncated; exact sums from here on)."""
    return (p * 17592186044416.0).to(tl.int64)


@triton.jit
def _pick(sums, target, N: tl.constexpr):
    """Index of the first entry whose running sum exceeds ``target``, and the sum before it."""
    i = tl.arange(0, N)
    cum = tl.cumsum(sums, axis=0)
    at = tl.sum((cum <= target).to(tl.int32), axis=0)
    return at, tl.sum(tl.where(i == at, cum - sums, 0), axis=0)


@triton.jit
def _draw(Row, St, c, greedy, cid, corr, target, sums, V: tl.constexpr, NSUB: tl.constexpr,
          SUB: tl.constexpr, NBLK: tl.constexpr):
    """Inverse CDF over the residual: block, then sub-block, then token (integer units)."""
    blk, before = _pick(sums, target, NBLK)
    target -= before
    start = blk * (NSUB * SUB)
    si = tl.arange(0, NSUB)
    li = tl.arange(0, SUB)
    offs = start + si[:, None] * SUB + li[None, :]
    units = _units(_prob(Row, St, offs, offs < V, c, greedy))  # [NSUB, SUB]
    rel = cid - start
    in_blk = (rel >= 0) & (rel < NSUB * SUB)
    sub_corr = tl.where((rel[None, :] // SUB == si[:, None]) & in_blk[None, :], corr[None, :], 0)
    sb, before = _pick(tl.sum(units, axis=1) - tl.sum(sub_corr, axis=1), target, NSUB)
    target -= before
    row_units = tl.sum(tl.where(si[:, None] == sb, units, 0), axis=0)  # [SUB]
    el_corr = tl.where((rel[None, :] == (sb * SUB + li)[:, None]) & in_blk[None, :], corr[None, :], 0)
    idx, _ = _pick(row_units - tl.sum(el_corr, axis=1), target, SUB)
    return (start + sb * SUB + idx).to(tl.int64)


@triton.jit
def _walk(Logits, stride_row, Stats, Drafts, sd_b, Cand, Q, UA, sua_b, sua_k, b, c, greedy, S,
          K: tl.constexpr, KP2: tl.constexpr, SP2: tl.constexpr, NS: tl.constexpr):
    """Request ``b``'s accepted drafts: accept ``d_k`` iff ``u_k * q_k(d_k) <= p_k(d_k)``, the
    first failure stops the walk. All ``S`` tests at once (``SP2 >= S`` lanes): their loads do not
    wait on each other (a loop over the drafts chained ~3 loads per draft)."""
    k = tl.arange(0, SP2)
    live = k < S
    rows = b * (S + 1) + k
    d = tl.load(Drafts + b * sd_b + k, mask=live, other=-1)
    p_d = _prob(Logits + rows * stride_row, Stats + rows * NS, d, live & (d >= 0), c, greedy)
    kk = tl.arange(0, KP2)
    base = (b * S + k) * K
    tile = live[:, None] & (kk < K)[None, :]
    cid = tl.load(Cand + base[:, None] + kk[None, :], mask=tile, other=-1)
    q = tl.load(Q + base[:, None] + kk[None, :], mask=tile, other=0.0)
    q_d = tl.sum(tl.where(cid == d[:, None], q, 0.0), axis=1)
    ok = tl.load(UA + b * sua_b + k * sua_k, mask=live, other=0.0) * tl.maximum(q_d, 1e-20) <= p_d
    # the first failing draft (S when every one passes)
    return tl.min(tl.where(live & (ok == 0), k, S), axis=0).to(tl.int32)


@triton.jit
def _emit(Emitted, Accept, Drafts, sd_b, b, acc, extra, S):
    """The request's results in the dense path's layout: the drafts, then d_1 again, with the
    correction (or bonus) at position ``acc``; accept length ``acc + 1``."""
    for j in range(0, S + 1):
        dj = tl.load(Drafts + b * sd_b + tl.where(j < S, j, 0), mask=S > 0, other=0)
        tl.store(Emitted + b * (S + 1) + j, tl.where(acc == j, extra, dj))
    tl.store(Accept + b, (acc + 1).to(tl.int64))


@triton.jit(do_not_specialize=["sd_b", "sua_b", "sua_k", "sur_b", "S"])  # one for every S
def _accept_kernel(Logits, stride_row, Temp, s_temp, Stats, Drafts, sd_b, Cand, Q, UA, sua_b, sua_k, UR,
                   sur_b, Accept, Emitted, Part, Tickets, greedy_below, S, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids,
                   Pos, Loc, SeqLen, FeatOut, s_fo, QkvOut, s_qo, H, QW, V: tl.constexpr,
                   K: tl.constexpr, KP2: tl.constexpr, SP2: tl.constexpr, NSUB: tl.constexpr, SUB: tl.constexpr,
                   NBLK: tl.constexpr, NS: tl.constexpr, PICK: tl.constexpr, BLOCK_H: tl.constexpr,
                   BLOCK_Q: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    b = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    nblk = tl.num_programs(1)
    _, greedy, c = filter_hist.temperature_scale(Temp, s_temp, b, greedy_below)  # as filter_rows
    # Every program of the request walks the drafts (S loads of K candidates: cheap); then each
    # sums one block of the residual, and the last to finish draws from the sums.
    acc = _walk(Logits, stride_row, Stats, Drafts, sd_b, Cand, Q, UA, sua_b, sua_k, b, c, greedy, S, K, KP2, SP2, NS)
    row = b * (S + 1) + acc
    Row = Logits + row * stride_row
    St = Stats + row * NS
    if greedy != 0:  # the residual of a one-hot p is its argmax: no draw, no ticket
        if blk == 0:
            extra = tl.load(St + 3).to(tl.int64)
            _emit(Emitted, Accept, Drafts, sd_b, b, acc, extra, S)
            if PICK:  # the draft extend's one-row batch (N, ExtPos, ..., QW: LastRowPick.args)
                pick_at(b, acc.to(tl.int64), extra, S + 1, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos, Loc,
                        SeqLen, FeatOut, s_fo, QkvOut, s_qo, H, QW, BLOCK_H, BLOCK_Q)
    else:
        # The residual max(p - q, 0) = p - min(p, q): q lives on the draft's candidates only.
        kk = tl.arange(0, KP2)
        has_q = kk < tl.where(acc < S, K, 0)
        base = (b * S + tl.minimum(acc, S - 1)) * K
        cid = tl.load(Cand + base + kk, mask=has_q, other=-1)
        q = tl.load(Q + base + kk, mask=has_q, other=0.0)
        corr = tl.minimum(_units(_prob(Row, St, cid, cid >= 0, c, greedy)), _units(q))
        block: tl.constexpr = NSUB * SUB
        offs = blk * block + tl.arange(0, block)
        p_sum = tl.sum(_units(_prob(Row, St, offs, offs < V, c, greedy)), axis=0)
        inside = (cid >= blk * block) & (cid < blk * block + block)
        r_sum = p_sum - tl.sum(tl.where(inside, corr, 0), axis=0)
        Mine = Part + (b * nblk + blk) * 2
        tl.store(Mine, r_sum)
        tl.store(Mine + 1, p_sum)
        tl.debug_barrier()  # every thread's stores before the ticket releases them
        counter = Tickets + b
        if tl.atomic_add(counter, 1, sem="acq_rel") == nblk - 1:
            bi = tl.arange(0, NBLK)
            # .cg: the other programs' sums are in L2; never serve them from a stale L1 line
            at = Part + (b * nblk + bi) * 2
            sums = tl.load(at, mask=bi < nblk, other=0, cache_modifier=".cg")
            if tl.sum(sums, axis=0) <= 0:  # p <= q everywhere (a rejection of probability 0): p
                corr = corr * 0
                sums = tl.load(at + 1, mask=bi < nblk, other=0, cache_modifier=".cg")
            # u < 1 and float64 keep the target below the total, so the draw lands on a unit of mass.
            target = (tl.load(UR + b * sur_b).to(tl.float64) * tl.sum(sums, axis=0).to(tl.float64))
            extra = _draw(Row, St, c, greedy, cid, corr, target.to(tl.int64), sums, V, NSUB, SUB, NBLK)
            _emit(Emitted, Accept, Drafts, sd_b, b, acc, extra, S)
            if PICK:
                pick_at(b, acc.to(tl.int64), extra, S + 1, N, ExtPos, ExtLoc, Feat, s_f, Qkv, s_q, Ids, Pos, Loc,
                        SeqLen, FeatOut, s_fo, QkvOut, s_qo, H, QW, BLOCK_H, BLOCK_Q)
            tl.atomic_xchg(counter, 0)  # ready for the next launch (stream order)


def rejection_sample(logits: torch.Tensor, stats: torch.Tensor, temperature: torch.Tensor,
                     drafts: torch.Tensor, cand: torch.Tensor, q: torch.Tensor,
                     u_accept: torch.Tensor, u_residual: torch.Tensor, tickets: torch.Tensor | None = None,
                     emitted_out: torch.Tensor | None = None,
                     pick: LastRowPick | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Lossless rejection sampling of ``drafts`` [B, S] against the rows ``filter_rows``
    described (``logits`` [B * (S + 1), V], ``stats``), the drafts' candidate distributions
    ``cand`` [B, S, K] (target ids, distinct per row) / ``q`` [B, S, K], uniforms ``u_accept``
    [B, S] and ``u_residual`` [B] (any strides; ``temperature`` too). Returns ``accept_len`` [B] int64 in 1..S+1 and
    ``emitted`` [B, S+1] int64 in ``rejection_accept``'s layout (columns past the accepted ones
    hold drafts, the last one d_1).

    One launch of ``cdiv(V, 4096)`` programs per request: each sums one block of the residual,
    the last to finish (an atomic ticket per request) draws from the sums. ``tickets``: >= B
    int32 counters at 0, left at 0 (a graph passes one it owns; None: zeroed here, one more
    kernel). ``emitted_out`` [B, S+1] int64 contiguous: written as ``emitted`` and returned as it.
    ``pick``: the program that emits a request's tokens also writes its last accepted row into
    the draft extend's one-row batch (``last_row.pick_at``; ``pick.src``'s emitted tokens must
    be these), where ``last_row.pick_last_rows`` would be a launch after this one."""
    bs, s = drafts.shape
    vocab = logits.shape[1]
    k = cand.shape[2]
    dev = logits.device
    accept = torch.empty(bs, dtype=torch.int64, device=dev)
    emitted = emitted_out if emitted_out is not None else torch.empty((bs, s + 1), dtype=torch.int64, device=dev)
    if emitted.shape != (bs, s + 1) or emitted.dtype != torch.int64 or not emitted.is_contiguous():
        raise ValueError(f"rejection_sample: emitted_out must be [{bs}, {s + 1}] int64 contiguous")
    block = _NSUB * _SUB
    nblk = triton.cdiv(vocab, block)
    if tickets is None:
        tickets = torch.zeros(bs, dtype=torch.int32, device=dev)
    if tickets.dtype != torch.int32 or tickets.numel() < bs or not tickets.is_contiguous():
        raise ValueError(f"rejection_sample: tickets must be >= {bs} contiguous int32 counters")
    part = torch.empty((bs, nblk, 2), dtype=torch.int64, device=dev)
    if pick is not None:
        pick.require_reads(emitted_out, "rejection_sample")
    pick_args, pick_consts = (pick.args(), pick.consts()) if pick is not None else LastRowPick.absent(accept)
    _accept_kernel[(bs, nblk)](
        logits, logits.stride(0), temperature, temperature.stride(0), stats, drafts,
        drafts.stride(0), cand.contiguous(), q.float().contiguous(), u_accept,
        u_accept.stride(0), u_accept.stride(1), u_residual, u_residual.stride(0), accept, emitted, part, tickets,
        GREEDY_TEMPERATURE, s, *pick_args, V=vocab, K=k, KP2=triton.next_power_of_2(k),
        SP2=max(2, triton.next_power_of_2(s)), NSUB=_NSUB, SUB=_SUB, NBLK=triton.next_power_of_2(nblk), NS=stats.shape[1],
        PICK=pick is not None, **pick_consts, num_warps=8, **pdl_opts(logits.device, "sampling"),
    )
    return accept, emitted

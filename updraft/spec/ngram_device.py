"""N-gram (prompt lookup) drafting on the device, for the fused iteration.

``NgramIndex`` (``updraft.spec.ngram``) keeps a host-side dictionary per request; the fused
iteration cannot consult one without a host round trip per iteration. Here every request-pool
row has a token history on the device instead, and drafts come from a matcher made of static-
shape tensor ops, so the whole lookup runs inside the captured graph:

* ``DeviceNgram.hist`` ``[rows, PAD + width]`` int32: position ``p`` of a row's sequence is column
  ``PAD + p``; the first ``PAD = n_max`` columns hold ``SENTINEL`` (no token id is negative), so
  the matcher's shifted views need no bounds checks. Only positions ``< length`` (the row's
  committed length in ``RowState``) are history; anything at or past it is stale.
* ``admit``: when a request enters decoding (its prefill finished, or a per-phase iteration ran),
  the host writes the tokens the device does not have yet, in one packed host-to-device copy.
* ``append`` (the reference; inside the graph the commit launch does it, ``spec.commit``): an
  iteration's emitted tokens at positions ``N..N+S``; the ones past ``N + accept_len - 1`` are
  junk at positions the next length does not reach.
* ``match_drafts`` (the torch reference; inside the graph ``lookup_into``'s kernel, one launch,
  one program per request): what ``NgramIndex.propose`` returns for the same history, token for
  token: the most recent EARLIER occurrence of the longest suffix n-gram (``n_max`` down to
  ``n_min``), then the tokens that followed it, padded with the last of them; without a match,
  the last token repeated. The n-gram proposer drafts with it, and so does the lookup assist
  beside a draft head (``LookupAssist``), in the rows whose match is long enough.

Cost per iteration: ``n_max`` compares per history position, one max: linear in the context,
nothing quadratic, no host sync (the torch matcher is ~25 kernels inside a graph; the kernel is
one, within the noise of an S = 5 cycle on the H100).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import pdl_enter, pdl_opts
from updraft.runtime.request_view import RequestView
from updraft.runtime.transfer import to_device
from updraft.spec.sampling_kernels import use_triton

#: History value of the columns before position 0 (token ids are never negative).
SENTINEL = -1


@dataclass(frozen=True)
class LookupAssist:
    """A draft model's chain replaced by the n-gram lookup's drafts in the rows whose history
    repeats its last ``min_match`` tokens (suffixes of ``n_min..n_max`` tokens are matched; the
    fused path, ``SpeculativeConfig.ngram_assist``; a sampled iteration accepts those rows' drafts
    against q one-hot at each, as the n-gram proposer's). Where a request copies
    from its prompt or repeats itself, the lookup drafts what a small head misses (rare words,
    names, code it saw). H100, bf16, greedy S = 5, the head shipped then (2026-11-27): mt_bench 2.66 -> 2.84,
    alpaca 2.45 -> 2.89, sum 2.19 -> 2.63, every set better, at no cost in the S = 5 cycle that
    four alternating rounds resolve (``benchmarks/results/2026-11-27-h100-lookup-assist/``)."""

    n_min: int
    n_max: int
    min_match: int


def match_drafts(hist: torch.Tensor, lens: torch.Tensor, n_min: int, n_max: int, k: int, pad: int,
                 with_match: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``[B, k]`` int64 drafts per row of ``hist`` ``[B, pad + W]`` (``pad >= n_max`` sentinel
    columns, then positions ``0..W-1``) whose first ``lens[b] >= 1`` positions are history;
    ``with_match``: also the length of the suffix each row matched ``[B]`` (0: none).

    ``count[e]``: how many tokens ending at candidate end ``e`` equal the suffix's (up to
    ``n_max``), built one shifted compare at a time. Only ``e <= L - 2`` may match (an EARLIER
    occurrence), which keeps every window and every continuation below ``L``; a suffix longer
    than the history reads sentinel columns, which no real window matches. The longest ``n``
    wins, then the latest ``e``: one max over ``count * W + e``."""
    bs, cols = hist.shape
    width = cols - pad
    assert (n_max + 1) * width < 2**31, "scores are int32"
    dev = hist.device
    pos = torch.arange(width, device=dev, dtype=torch.int32)
    last = lens.long() - 1  # [B] position of the last (bonus) token
    m = pos[None, :] < last[:, None].to(torch.int32)
    count = torch.zeros(bs, width, dtype=torch.int32, device=dev)
    for i in range(n_max):  # after this pass m marks the ends whose i + 1 tokens match
        tok = hist.gather(1, (pad + last - i)[:, None])  # the suffix's token at L - 1 - i
        m &= hist[:, pad - i : cols - i] == tok  # the window's token at e - i
        count += m
    best = torch.where(count >= n_min, count * width + pos, -1).amax(1)
    end = best.long() % width
    j = torch.arange(1, k + 1, device=dev)
    at = torch.minimum(end[:, None] + j, last[:, None])  # continuation, clamped to the history
    at = torch.where(best[:, None] >= 0, at, last[:, None])  # no match: the last token
    drafts = hist.gather(1, pad + at).long()
    if with_match:
        return drafts, torch.where(best >= 0, best // width, 0)
    return drafts


def one_hot_rows(drafts: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic drafts ``[B, S]`` as the rejection sampling's sparse q: ``[B, S, k]``
    probabilities (1 at the draft, 0 elsewhere) and candidates (the draft, then ids ``0, 1, ...``
    without it: distinct in each row, as the acceptance requires; a 0 never adds to q)."""
    j = torch.arange(k - 1, device=drafts.device)
    rest = j + (j[None, None, :] >= drafts[:, :, None]).long()
    cand = torch.cat([drafts[:, :, None], rest], dim=2)
    q = torch.zeros(cand.shape, dtype=torch.float32, device=drafts.device)
    q[:, :, 0] = 1.0
    return q, cand


@triton.jit(do_not_specialize=["MIN_MATCH"])
def _lookup_kernel(Hist, s_h, Rows, Lens, Ids, s_i, Q, Cand, s_qb, s_qk, s_cb, s_ck, W, MIN_MATCH, PAD: tl.constexpr,
                   N_MIN: tl.constexpr, N_MAX: tl.constexpr, N_P2: tl.constexpr, K: tl.constexpr,
                   BLOCK_K: tl.constexpr, DIST: tl.constexpr, KC: tl.constexpr, BLOCK_KC: tl.constexpr,
                   BLOCK_E: tl.constexpr, FILL: tl.constexpr, PDL: tl.constexpr):
    """``match_drafts`` for request ``b`` (its row's history, its committed length) in one program:
    the drafts go to ``Ids[b, 1..K]`` where the suffix matched ``>= MIN_MATCH`` tokens (0: always,
    the n-gram proposer's drafts, the last token repeated without a match); FILL: -1 there
    otherwise (``DeviceNgram.locks``); DIST: their q and candidates ``[b, :K, :KC]`` too, one-hot
    at each draft (``one_hot_rows``)."""
    pdl_enter(PDL)
    b = tl.program_id(0)
    h = Hist + tl.load(Rows + b).to(tl.int64) * s_h + PAD  # position p at h + p
    last = tl.load(Lens + b).to(tl.int32) - 1
    t = tl.arange(0, N_P2)
    suffix = tl.load(h + last - t, mask=t < N_MAX, other=-1)  # tokens at last - i (>= -PAD: sentinels)
    best = tl.full([], -1, tl.int32)
    for e0 in range(0, last, BLOCK_E):  # candidate ends e <= last - 1: EARLIER occurrences only
        e = e0 + tl.arange(0, BLOCK_E)
        live = e < last
        m = live
        count = tl.zeros([BLOCK_E], tl.int32)
        for i in tl.static_range(N_MAX):  # the suffix's token at last - i against the window's at e - i
            tok = tl.sum(tl.where(t == i, suffix, 0), axis=0)
            # masked by ``live`` only: the N_MAX loads do not wait for each other's compares
            m = m & (tl.load(h + e - i, mask=live, other=-1) == tok)  # -1: SENTINEL
            count += m.to(tl.int32)
        best = tl.maximum(best, tl.max(tl.where(count >= N_MIN, count * W + e, -1), axis=0))
    found = best >= 0
    j = tl.arange(0, BLOCK_K) + 1
    at = tl.where(found, tl.minimum(best % W + j, last), last)
    jm = j <= K
    d = tl.load(h + at, mask=jm, other=0)
    match = tl.zeros([BLOCK_K], tl.int32) + tl.where(found, best // W, 0)  # per lane: a vector mask
    take = jm & (match >= MIN_MATCH)
    if FILL:
        tl.store(Ids + b * s_i + j, tl.where(take, d.to(Ids.dtype.element_ty), -1), mask=jm)
    else:
        tl.store(Ids + b * s_i + j, d.to(Ids.dtype.element_ty), mask=take)
    if DIST:
        c = tl.arange(0, BLOCK_KC)
        tile = take[:, None] & (c < KC)[None, :]
        dl = d.to(tl.int64)[:, None]
        ci = c.to(tl.int64)[None, :] - 1
        cand = tl.where(c[None, :] == 0, dl, ci + (ci >= dl).to(tl.int64))
        k0 = (j - 1).to(tl.int64)[:, None]
        tl.store(Cand + b * s_cb + k0 * s_ck + c[None, :], cand.to(Cand.dtype.element_ty), mask=tile)
        tl.store(Q + b * s_qb + k0 * s_qk + c[None, :], tl.where(c[None, :] == 0, 1.0, 0.0), mask=tile)


class DeviceNgram:
    """Per-row token histories on the device and the n-gram matcher over them."""

    def __init__(self, num_rows: int, width: int, n_min: int, n_max: int, device: torch.device) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"ngram_min={n_min}, ngram_max={n_max}: need 1 <= ngram_min <= ngram_max")
        self.n_min, self.n_max = n_min, n_max
        self.pad = n_max
        self.width = width
        self.device = device
        # Positions start as token 0: padded rows (row 0, length 1) draft real token ids.
        self.hist = torch.zeros(num_rows, self.pad + width, dtype=torch.int32, device=device)
        self.hist[:, : self.pad] = SENTINEL
        # Host bookkeeping: which request last wrote a row, and how many of its positions are
        # known to be on the device (the graph appends more; rewriting those is harmless).
        self._owner: list[weakref.ref[RequestView] | None] = [None] * num_rows
        self._synced = [0] * num_rows

    # ---- host side ---------------------------------------------------------------------------
    def admit(self, reqs: list[RequestView]) -> None:
        """Write the positions of ``reqs``' histories the device may lack (all of a row another
        request wrote last: a new request, or a preempted one that came back elsewhere)."""
        rows: list[int] = []
        cols: list[int] = []
        toks: list[int] = []
        for r in reqs:
            row = r.row
            assert row is not None, "admit needs a request that holds a row"
            owner = self._owner[row]
            n = r.seq_len
            assert n <= self.width, f"request {r.request_id}: {n} tokens, history width {self.width}"
            start = min(self._synced[row], n) if owner is not None and owner() is r else 0
            new = r.tokens(start, n)
            rows.extend([row] * len(new))
            cols.extend(range(self.pad + start, self.pad + n))
            toks.extend(new)
            self._owner[row] = weakref.ref(r)
            self._synced[row] = n
        if not toks:
            return
        packed = to_device(torch.tensor([rows, cols, toks], dtype=torch.int64), self.device)
        self.hist[packed[0], packed[1]] = packed[2].to(torch.int32)

    # ---- inside the graph --------------------------------------------------------------------
    def propose(self, rows: torch.Tensor, lens: torch.Tensor, k: int) -> torch.Tensor:
        """``[bs, k]`` drafts for the rows ``rows`` of committed lengths ``lens``."""
        return match_drafts(self.hist[rows], lens, self.n_min, self.n_max, k, self.pad)

    def locks(self, rows: torch.Tensor, lens: torch.Tensor, s: int, min_match: int) -> torch.Tensor:
        """``[bs, S + 1]`` int64, shaped as a verify block: columns ``1..S`` hold each row's
        ``propose`` drafts where its suffix matched at least ``min_match`` tokens, else -1
        (column 0 is not written). What ``lookup_into`` would write, kept apart: the greedy draft
        picks take it in place of their own (``sampling_kernels.argmax_rows(..., lock=)``), so
        the lookup runs beside the chain instead of after it."""
        out = torch.empty(rows.shape[0], s + 1, dtype=torch.long, device=rows.device)
        self._lookup(rows, lens, out, min_match, None, fill=True)
        return out

    def lookup_into(self, rows: torch.Tensor, lens: torch.Tensor, ids: torch.Tensor, min_match: int = 0,
                    dist: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """Write each row's ``propose`` drafts into ``ids[:, 1:]`` (a verify block ``[bs, S + 1]``,
        column 0 the bonus) where its suffix matched at least ``min_match`` tokens (0: every row);
        the other rows keep theirs. ``dist``: the drafts' distributions for the rejection
        sampling, (q, candidates) ``[bs, S, K]`` each; a replaced row's become one-hot at its
        lookup (``one_hot_rows``). One launch on CUDA (``_lookup_kernel``), the torch matcher
        elsewhere."""
        self._lookup(rows, lens, ids, min_match, dist, fill=False)

    def _lookup(self, rows: torch.Tensor, lens: torch.Tensor, ids: torch.Tensor, min_match: int,
                dist: tuple[torch.Tensor, torch.Tensor] | None, *, fill: bool) -> None:
        """``lookup_into``; ``fill``: the other rows' drafts become -1 (``locks``; no ``dist``)."""
        bs, ndt = ids.shape
        k = ndt - 1
        assert not (fill and dist is not None), "locks carry no distributions"
        if k == 0 or bs == 0:
            return
        if not use_triton(ids):
            drafts, match = match_drafts(self.hist[rows], lens, self.n_min, self.n_max, k, self.pad, with_match=True)
            take = match >= min_match
            ids[:, 1:].copy_(torch.where(take[:, None], drafts, -1 if fill else ids[:, 1:]))
            if dist is not None:
                q1, c1 = one_hot_rows(drafts, dist[0].shape[2])
                dist[0].copy_(torch.where(take[:, None, None], q1, dist[0]))
                dist[1].copy_(torch.where(take[:, None, None], c1, dist[1]))
            return
        width = self.hist.shape[1] - self.pad
        q, cand = dist if dist is not None else (ids, ids)
        kc = int(q.shape[2]) if dist is not None else 1
        _lookup_kernel[(bs,)](
            self.hist, self.hist.stride(0), rows, lens, ids, ids.stride(0), q, cand, q.stride(0), q.stride(1),
            cand.stride(0), cand.stride(1), width, min_match, PAD=self.pad, N_MIN=self.n_min, N_MAX=self.n_max,
            N_P2=triton.next_power_of_2(self.n_max), K=k, BLOCK_K=triton.next_power_of_2(k), DIST=dist is not None,
            KC=kc, BLOCK_KC=triton.next_power_of_2(kc), BLOCK_E=1024, FILL=fill, num_warps=4,
            **pdl_opts(ids.device, "sampling"),
        )

    def append(self, rows: torch.Tensor, lens: torch.Tensor, emitted: torch.Tensor) -> None:
        """Write ``emitted`` ``[bs, S + 1]`` at positions ``lens..lens + S`` of each row (columns
        past the accepted ones are junk beyond the new length; padded rows write row 0)."""
        cols = self.pad + lens[:, None] + torch.arange(emitted.shape[1], device=lens.device)
        self.hist[rows[:, None], cols.clamp_(max=self.hist.shape[1] - 1)] = emitted.to(torch.int32)

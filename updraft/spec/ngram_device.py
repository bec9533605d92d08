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
* ``append`` (inside the graph): an iteration's emitted tokens at positions ``N..N+S``; the ones
  past ``N + accept_len - 1`` are junk at positions the next length does not reach.
* ``match_drafts`` (inside the graph): what ``NgramIndex.propose`` returns for the same history,
  token for token: the most recent EARLIER occurrence of the longest suffix n-gram
  (``n_max`` down to ``n_min``), then the tokens that followed it, padded with the last of them;
  without a match, the last token repeated.

Cost per iteration: ``n_max`` compares, ANDs and adds over ``[bs, width]``, then one masked max:
linear in the context, nothing quadratic, no host sync.
"""

from __future__ import annotations

import weakref

import torch

from updraft.runtime.request_view import RequestView

#: History value of the columns before position 0 (token ids are never negative).
SENTINEL = -1


def match_drafts(hist: torch.Tensor, lens: torch.Tensor, n_min: int, n_max: int, k: int, pad: int) -> torch.Tensor:
    """``[B, k]`` int64 drafts per row of ``hist`` ``[B, pad + W]`` (``pad >= n_max`` sentinel
    columns, then positions ``0..W-1``) whose first ``lens[b] >= 1`` positions are history.

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
    return hist.gather(1, pad + at).long()


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
        packed = torch.tensor([rows, cols, toks], dtype=torch.int64)
        if self.device.type == "cuda":  # pinned: a pageable copy would wait for the iteration in flight
            packed = packed.pin_memory()
        packed = packed.to(self.device, non_blocking=True)
        self.hist[packed[0], packed[1]] = packed[2].to(torch.int32)

    # ---- inside the graph --------------------------------------------------------------------
    def propose(self, rows: torch.Tensor, lens: torch.Tensor, k: int) -> torch.Tensor:
        """``[bs, k]`` drafts for the rows ``rows`` of committed lengths ``lens``."""
        return match_drafts(self.hist[rows], lens, self.n_min, self.n_max, k, self.pad)

    def append(self, rows: torch.Tensor, lens: torch.Tensor, emitted: torch.Tensor) -> None:
        """Write ``emitted`` ``[bs, S + 1]`` at positions ``lens..lens + S`` of each row (columns
        past the accepted ones are junk beyond the new length; padded rows write row 0)."""
        cols = self.pad + lens[:, None] + torch.arange(emitted.shape[1], device=lens.device)
        self.hist[rows[:, None], cols.clamp_(max=self.hist.shape[1] - 1)] = emitted.to(torch.int32)

"""The lookup assist of the per-phase iteration (``SpecWorker``): where a request's history
repeats its last ``min_match``+ tokens, the verify checks the n-gram lookup's continuation
instead of the draft model's chain. The fused iteration does the same on the device
(``ngram_device.DeviceNgram.lookup_into``); this one matches on the host, over each request's
``NgramIndex`` (O(n_max) per new token), so batches the fused iteration does not take
(penalties, logprobs, batch sizes above the largest graph) keep the assist.

Losslessness: whether a row takes the lookup depends only on its committed tokens, never on the
draft's random draws, and each lookup draft is a function of the history and the drafts before
it. So a sampled row's q becomes one-hot at each lookup draft (rejection sampling then accepts
draft k with probability p_k(d_k) and otherwise draws from p_k without it), exactly as for the
n-gram proposer. The draft model's state is not touched: its extend reads the emitted tokens.
"""

from __future__ import annotations

import torch

from updraft.spec.ngram import RequestHistories
from updraft.spec.ngram_device import LookupAssist
from updraft.spec.request_view import SpecRequestView


class HostLookupAssist:
    """See the module docstring; ``params``: the assist's (``LookupAssist``, which the fused
    iteration takes too): suffix lengths matched and the shortest repeat whose lookup is verified."""

    def __init__(self, params: LookupAssist) -> None:
        if params.min_match < 1:
            raise ValueError(f"lookup assist: min_match={params.min_match}; it must be >= 1")
        self.params = params
        self.histories = RequestHistories(params.n_min, params.n_max)
        self.lookups = 0  # rows looked up
        self.replaced = 0  # rows whose drafts the lookup replaced

    def apply(self, reqs: list[SpecRequestView], tokens: torch.Tensor,
              q: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``tokens`` [B, S] (target ids) and ``q`` [B, S, V] (None: deterministic drafts) of the
        draft model; returns them with the matching rows replaced (new tensors where any row is;
        the inputs are never written)."""
        s = tokens.shape[1]
        if s == 0:
            return tokens, q
        rows: list[int] = []
        conts: list[list[int]] = []
        for b, req in enumerate(reqs):
            idx = self.histories.synced(req.request_id, req.prompt_ids, req.output_ids, req.seq_len)
            cont, n = idx.lookup(s)
            if n >= self.params.min_match:
                rows.append(b)
                conts.append(cont)
        self.lookups += len(reqs)
        self.replaced += len(rows)
        if not rows:
            return tokens, q
        dev = tokens.device
        sel = torch.tensor(rows, dtype=torch.long).to(dev, non_blocking=True)
        look = torch.tensor(conts, dtype=tokens.dtype).to(dev, non_blocking=True)
        tokens = tokens.clone()
        tokens[sel] = look
        if q is not None:
            q = q.clone()
            q[sel] = 0
            q[sel[:, None], torch.arange(s, device=dev)[None, :], look] = 1.0
        return tokens, q

    def release(self, request_id: str) -> None:
        self.histories.release(request_id)

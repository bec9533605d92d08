"""Independent float64 attention reference for tests and the attention test kit.

It shares no code with any backend: it takes each request's logical keys and values (positions
``0 .. L-1``, not pool slots) and computes softmax attention with einsum in float64.
"""

from __future__ import annotations

import torch


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of one request.

    ``q`` [n, Hq, D] are the queries of the last ``n`` positions of a sequence whose keys and
    values are ``k``/``v`` [L, Hkv, D] (L >= n). Query ``i`` sits at position ``L - n + i`` and sees
    positions ``<=`` its own (causal), further restricted by ``mask`` [n, n] (bool, True = may
    attend) inside the last ``n`` positions when given (tree verification). Returns [n, Hq, D] in
    float64.
    """
    n, hq, _ = q.shape
    length, hkv, _ = k.shape
    if length < n:
        raise ValueError(f"need at least as many keys as queries: L={length}, n={n}")
    group = hq // hkv
    q64 = q.double()
    k64 = k.double().repeat_interleave(group, dim=1)
    v64 = v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,lhd->hnl", q64, k64) * scale
    qpos = torch.arange(n) + (length - n)
    kpos = torch.arange(length)
    allowed = kpos[None, :] <= qpos[:, None]
    if mask is not None:
        block = torch.ones(n, length, dtype=torch.bool)
        block[:, length - n :] = mask.bool().cpu()
        allowed = allowed & block
    scores = scores.masked_fill(~allowed[None].to(scores.device), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hnl,lhd->nhd", probs, v64)

"""Independent float64 attention reference for tests and the attention test kit.

It shares no code with any backend: it takes each request's logical keys and values (positions
``0 .. L-1``, not pool slots) and computes softmax attention with einsum in float64.
``reference_mla_attention`` does the same over MLA's latent rows (V read from K's leading
columns, one KV row shared by every query head).
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


def reference_mla_attention(
    q: torch.Tensor,
    latent: torch.Tensor,
    v_head_dim: int,
    scale: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """MLA attention of one request over its latent cache (the weights absorbed by the model).

    ``latent`` [L, Dk] holds one row per position, ``[c | k_rope]``: the scores are
    ``q . latent`` over all ``Dk`` columns and the values are ``c = latent[:, :v_head_dim]``,
    one KV "head" shared by every query head. ``q`` [n, H, Dk] are the queries of the last
    ``n`` positions (causal; ``mask`` [n, n] restricts the block as in ``reference_attention``).
    Returns [n, H, v_head_dim] in float64. Written on its own (no call into
    ``reference_attention``), so the two references do not share a bug.
    """
    n = q.shape[0]
    length, dk = latent.shape
    if length < n:
        raise ValueError(f"need at least as many cache rows as queries: L={length}, n={n}")
    if not 0 < v_head_dim <= dk or q.shape[-1] != dk:
        raise ValueError(f"q width {q.shape[-1]}, latent width {dk}, v_head_dim {v_head_dim}")
    lat = latent.double()
    scores = torch.einsum("nhd,ld->hnl", q.double(), lat) * scale
    pos_q = torch.arange(length - n, length)[:, None]
    visible = torch.arange(length)[None, :] <= pos_q  # [n, L]
    if mask is not None:
        visible[:, length - n :] &= mask.bool().cpu()
    scores = scores.masked_fill(~visible.to(scores.device), float("-inf"))
    return torch.einsum("hnl,lc->nhc", torch.softmax(scores, dim=-1), lat[:, :v_head_dim])

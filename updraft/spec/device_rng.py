"""Counter-based random numbers for sampling inside CUDA graphs.

A captured graph cannot draw from per-request ``torch.Generator`` objects (their state lives on
the host), and the default CUDA generator would tie every request to one stream. Instead each
draw is a pure function of ``(seed, offset, stream, column)``:

* ``seed`` [B]: the request's seed (its ``SamplingParams.seed``, or one the engine drew for it);
* ``offset`` [B]: the request's iteration counter, advanced by the graph itself after every
  iteration (a graph that forgot to advance it would sample the same numbers every replay);
* ``stream``: a small host constant naming the purpose inside one iteration (draft step k,
  acceptance uniforms, residual sample), frozen at capture like any other host scalar;
* ``column``: the index inside the row (draft position; one per row for a token draw, which
  ``inverse_cdf`` turns into an index).

The hash is Thomas Mueller's 32-bit integer mixer, computed in int64 with every product below
2**63 (the multiplier is below 2**31 and the operand below 2**32), so CPU and CUDA give the same
bits and a seeded run repeats token for token on either.
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective avalanche mix of 32-bit values held in int64 (out of place)."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = (x * _MUL) & _M32
    x = x ^ (x >> 16)
    x = (x * _MUL) & _M32
    return x ^ (x >> 16)


def row_keys(seed: torch.Tensor, offset: torch.Tensor, stream: int) -> torch.Tensor:
    """[B] int64 32-bit key per row for one (seed, offset, stream) triple."""
    k = _mix32(seed.long() ^ (stream * 0x9E3779B1 & _M32))
    k = _mix32(k ^ (seed.long() >> 32))
    return _mix32(k ^ offset.long())


def uniform(seed: torch.Tensor, offset: torch.Tensor, stream: int, n: int) -> torch.Tensor:
    """[B, n] float32 uniforms in (0, 1): 23 random bits plus one half, which float32 holds
    exactly (24 significant bits), so a draw is never 0 or 1. (With 24 bits, ``2**24 - 1 + 0.5``
    rounds to ``2**24``: a draw of exactly 1.0 once in 2**24, which an inverse CDF runs off.)"""
    keys = row_keys(seed, offset, stream)
    cols = torch.arange(n, device=keys.device, dtype=torch.int64)
    bits = _mix32((keys[:, None] + cols[None, :] * 0x632BE5AB) ^ keys[:, None] >> 7)
    return ((bits >> 9).to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[B] int64: index ``i`` of row ``b`` with probability ``weights[b, i] / weights[b].sum()``,
    from one uniform ``u[b]`` in (0, 1). Rows need not be normalised but need positive mass; the
    running sum is float64 so a 128k vocabulary loses nothing to rounding. Zero-weight entries
    are never picked (the search lands on the first entry whose running sum exceeds the target).
    One uniform per row instead of one noise value per vocabulary entry (the exponential race)."""
    c = weights.double().cumsum(-1)
    target = (u.double() * c[:, -1])[:, None]
    return torch.searchsorted(c, target, right=True).squeeze(1).clamp_(max=weights.shape[-1] - 1)

"""Pure-torch paths of the fused ops: the model's original (unfused) code, op for op.

These run on CPU, wherever Triton is unavailable, and as the reference the Triton kernels are
tested against. They are written to round exactly where the pre-fusion model code rounded (and
where Hugging Face transformers rounds), so the CPU path is bitwise unchanged by the fusion work.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * (x / rms(x))``: statistics in float32, the normalised value cast back to
    ``x.dtype`` before the weight multiply (so the product rounds in the promoted dtype)."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rmsnorm(x + residual), x + residual)``; the sum rounds to the input dtype first, as the
    unfused ``residual + x`` did (addition commutes exactly, so the order does not matter)."""
    new_residual = x + residual
    return rmsnorm(new_residual, weight, eps), new_residual


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox rotary on the last dim: ``x * cos + cat(-x2, x1) * sin`` (``cos``/``sin`` full width)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def cos_sin_at(positions: torch.Tensor, cos_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-width ``cos``, ``sin`` [T, 1, D] for ``positions`` from a ``[max_pos, D]`` table whose
    rows are ``cat(cos(f), sin(f))`` over the D/2 frequencies."""
    cos, sin = cos_sin[positions].chunk(2, dim=-1)  # [T, D/2] each
    cos = torch.cat([cos, cos], dim=-1)[:, None, :]
    sin = torch.cat([sin, sin], dim=-1)[:, None, :]
    return cos, sin


def rotary_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> None:
    """Rotate ``q`` [T, Hq, D] and ``k`` [T, Hkv, D] in place (any strides). The values written
    are exactly the unfused ``rotate_half`` results (computed out of place, then copied back)."""
    cos, sin = cos_sin_at(positions, cos_sin)
    q.copy_(rotate_half(q, cos, sin))
    k.copy_(rotate_half(k, cos, sin))


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` over ``gate_up = cat(gate, up)`` on the last dim."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up

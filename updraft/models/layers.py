"""Building blocks of the Llama family: RMSNorm, rotary embeddings, gated MLP, fused linears.

The element-wise work goes through ``updraft.ops`` (Triton kernels on CUDA, the original torch
code on CPU; see that package for the numerics contract).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from updraft import ops
from updraft.models.config import RopeScaling


class RMSNorm(nn.Module):
    """RMSNorm computed in float32 and cast back before the weight multiply, as the reference
    implementations do."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rmsnorm(x, self.weight, self.eps)

    def forward_add(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm(x + residual), x + residual)`` in one pass: the residual add of the previous
        sub-block fused into this norm. Neither input is modified."""
        return ops.fused_add_rmsnorm(x, residual, self.weight, self.eps)


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] in float32, with linear, llama3 or yarn scaling applied."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling.kind == "linear":
        return inv / scaling.factor
    if scaling.kind == "yarn":
        return _yarn_inv_freq(inv, head_dim, theta, scaling)
    if scaling.kind == "llama3":
        low_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor
        high_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / scaling.factor, inv)
        smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor) / (
            scaling.high_freq_factor - scaling.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, smoothed, scaled)
    return inv


def _yarn_inv_freq(inv: torch.Tensor, head_dim: int, theta: float, scaling: RopeScaling) -> torch.Tensor:
    """YaRN: high frequencies (many rotations over the original context) keep their value, low
    ones are divided by ``factor``, with a linear ramp between the dims that rotate
    ``beta_fast`` and ``beta_slow`` times over ``original_max_position_embeddings``."""

    def dim_of(rotations: float) -> float:  # the dim whose wavelength fits `rotations` times
        return head_dim * math.log(scaling.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_of(scaling.beta_fast), dim_of(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (keep the frequency), 0: interpolate (divide by factor)
    return (inv / scaling.factor) * (1 - keep) + inv * keep


class RotaryEmbedding(nn.Module):
    """Neox-style (rotate-half) rotary embedding over a precomputed cos/sin table."""

    def __init__(self, head_dim: int, max_positions: int, theta: float, scaling: RopeScaling) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.max_positions = max_positions
        self.theta = theta
        self.scaling = scaling
        self.register_buffer("cos_sin", torch.empty(0), persistent=False)

    def build(self, device: torch.device, dtype: torch.dtype, max_positions: int | None = None) -> None:
        """(Re)compute the table on ``device`` in ``dtype`` (values computed in float32, then cast,
        as the reference implementations do); called after weights are loaded. YaRN's magnitude
        correction (``RopeScaling.cos_sin_factor``) is folded into the table, which scales the
        rotated q and k alike, as the reference implementations' scaled cos/sin do."""
        if max_positions is not None:
            self.max_positions = max_positions
        inv = rope_inv_freq(self.head_dim, self.theta, self.scaling).to(device)
        pos = torch.arange(self.max_positions, device=device, dtype=torch.float32)
        freqs = pos[:, None] * inv[None, :]
        table = torch.cat([freqs.cos(), freqs.sin()], dim=-1)
        factor = self.scaling.cos_sin_factor()
        self.cos_sin = (table * factor if factor != 1.0 else table).to(dtype)

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``q`` [T, Hq, D], ``k`` [T, Hkv, D] -> rotated copies (the inputs are unchanged)."""
        q, k = q.clone(), k.clone()
        self.apply_(positions, q, k)
        return q, k

    def apply_(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> None:
        """Rotate ``q`` [T, Hq, D] and ``k`` [T, Hkv, D] in place (views such as slices of the QKV
        projection output are fine; q and k must not overlap). Positions must be < the table
        size: nothing checks them on the GPU."""
        ops.rotary_(q, k, positions, self.cos_sin)


class Linear(nn.Linear):
    """``nn.Linear`` whose product goes through ``ops.dense`` (see there: the CPU float32 path)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.dense(x, self.weight, self.bias)


class MergedLinear(Linear):
    """A linear layer made of several checkpoint matrices stacked on the output dim (qkv,
    gate+up). ``shard_sizes`` gives each part's rows, in order."""

    def __init__(self, in_features: int, shard_sizes: list[int], bias: bool) -> None:
        super().__init__(in_features, sum(shard_sizes), bias=bias)
        self.shard_sizes = shard_sizes
        self.shard_offsets = [sum(shard_sizes[:i]) for i in range(len(shard_sizes))]

    def load_shard(self, index: int, name: str, tensor: torch.Tensor) -> None:
        target = self.weight if name == "weight" else self.bias
        if target is None:
            raise ValueError(f"checkpoint has a bias for a layer built without one ({name})")
        off, size = self.shard_offsets[index], self.shard_sizes[index]
        if tensor.shape[0] != size or (name == "weight" and tensor.shape[1] != self.in_features):
            raise ValueError(
                f"shard {index} of {name}: expected {(size, self.in_features) if name == 'weight' else (size,)}, "
                f"got {tuple(tensor.shape)}"
            )
        with torch.no_grad():
            target[off : off + size].copy_(tensor)


class GatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with gate and up as one projection."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = MergedLinear(hidden, [intermediate, intermediate], bias=False)
        self.down_proj = Linear(intermediate, hidden, bias=False)
        #: The small-M GEMMs of the fused path (``ops.FusedPolicy``): gate/up + SiLU-mul, down.
        self.gemms: tuple[ops.Gemm, ...] = (("gate_up", intermediate, hidden, 0), ("linear", hidden, intermediate, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if ops.small_m(x, self.gemms):
            from updraft.models import fused

            return fused.mlp(self, x, fused.no_prologue())[0]
        return self.down_proj(ops.silu_and_mul(self.gate_up_proj(x)))

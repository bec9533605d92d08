"""``dense(x, weight, bias)``: what ``F.linear`` computes, with a CPU float32 path that reads the
weight at the memory's speed at decode sizes.

On CPU, ``F.linear`` hands MKL ``x @ weight.T``: at one row that is a GEMV that runs at about a
third of the memory bandwidth on two cores, and at 2-8 rows a GEMM that costs about as many times
a one-row product as it has rows (measured on a 2-core CI-class machine: SmolLM2-135M's 30 layers
and LM head, 51 ms at one row, 98 ms at two, 114 ms at three). The same product computed as
``(weight @ x.T).T`` streams the weight once at 1-8 rows (23-40 ms at those sizes), is as fast
or faster up to 64 rows and 10-17% slower from 128 rows (prefill), which keeps ``F.linear``
(``MAX_ROWS``; ``benchmarks/cpu_dense.py`` measures both on the machine it runs on). One row is
padded to two: a one-column GEMM goes back to the slow GEMV.

Numerics: each output is the same dot product in float32; the summation order inside MKL differs
from ``F.linear``'s, so results agree to rounding (~1e-6 relative), not bit for bit. Other devices
and dtypes take ``F.linear`` unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Most rows (tokens) a product takes the CPU path with (see the module docstring).
MAX_ROWS = 64


def dense(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` for ``x`` [..., K] and ``weight`` [N, K] -> [..., N] (contiguous)."""
    if not _cpu_path(x, weight):
        return F.linear(x, weight, bias)
    k = x.shape[-1]
    rows = x.reshape(-1, k)
    m = rows.shape[0]
    if not 1 <= m <= MAX_ROWS:
        return F.linear(x, weight, bias)
    if m == 1:
        rows = rows.expand(2, k).contiguous()  # see the module docstring: never a one-column GEMM
    out_t = torch.mm(weight, rows.t())  # [N, M]
    # Row-major before the bias: ``out + bias`` would keep the transposed strides, and callers
    # (the fused kernels' inputs among them) need contiguous rows.
    out = out_t[:, :m].t().contiguous()
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _cpu_path(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32
            and weight.dim() == 2 and x.dim() >= 1)

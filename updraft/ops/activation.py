"""Triton ``silu(gate) * up`` over the fused gate/up projection output ``[T, 2I]``.

Grid: ``(T, cdiv(I, BLOCK))``; program ``(t, j)`` reads columns ``[j*BLOCK, (j+1)*BLOCK)`` of the
gate half and the same columns of the up half of row ``t`` and writes them to the ``[T, I]``
output. One read of the projection output and one write of the product replace the unfused
chunk + silu + mul (two full round trips through memory).

Numerics: ``silu`` in float32 (``g / (1 + exp(-g))``) rounded to the input dtype, then the
product with ``up`` in float32 rounded to the input dtype: where the unfused ``F.silu(gate) * up``
rounds. ``exp`` on the GPU is the fast hardware approximation (a few ulp in float32).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import emulate_rne, num_warps, pdl_enter, pdl_opts, round_to

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_BLOCK = 1024


@triton.jit
def silu_mul(g, u, dt: tl.constexpr, RNE: tl.constexpr):
    """``silu(g) * u`` in ``dt``: silu in float32 rounded to ``dt``, then the product rounded
    (shared with the gate/up GEMM epilogue of ``updraft.ops.gemv``)."""
    g = g.to(tl.float32)
    act = round_to(g / (1.0 + tl.exp(-g)), dt, RNE).to(tl.float32)  # g << 0: exp = inf, silu = -0
    return round_to(act * u.to(tl.float32), dt, RNE)


@triton.jit
def _silu_and_mul_kernel(
    X,
    Out,
    stride_xt,
    stride_ot,
    inter,
    BLOCK: tl.constexpr,
    RNE: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    row = X + t * stride_xt
    dt = X.dtype.element_ty
    g = tl.load(row + cols, mask=mask, other=0.0)
    u = tl.load(row + inter + cols, mask=mask, other=0.0)
    tl.store(Out + t * stride_ot + cols, silu_mul(g, u, dt, RNE), mask=mask)


def supported(gate_up: torch.Tensor) -> bool:
    """Whether the kernel covers this input (else the caller uses the torch path)."""
    return gate_up.dim() >= 1 and gate_up.dtype in DTYPES and gate_up.shape[-1] % 2 == 0


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``[..., 2I] -> [..., I]``: ``silu(gate_up[..., :I]) * gate_up[..., I:]``."""
    assert supported(gate_up), "silu_and_mul kernel: unsupported shape/dtype"
    inter = gate_up.shape[-1] // 2
    out = torch.empty((*gate_up.shape[:-1], inter), dtype=gate_up.dtype, device=gate_up.device)
    if out.numel() == 0:
        return out
    x = gate_up if gate_up.stride(-1) == 1 else gate_up.contiguous()
    x2 = x.reshape(-1, 2 * inter)  # a view for the usual [T, 2I] (and any row-dense layout)
    out2 = out.view(-1, inter)
    block = min(MAX_BLOCK, triton.next_power_of_2(inter))
    _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(inter, block))](
        x2,
        out2,
        x2.stride(0),
        out2.stride(0),
        inter,
        BLOCK=block,
        RNE=emulate_rne(),
        num_warps=num_warps(block), **pdl_opts(x2.device, "elementwise"),
    )
    return out

"""Triton RMSNorm and fused residual-add + RMSNorm.

Grid: one program per row; a row (the normalised last dim, ``D`` <= ``MAX_DIM``) lives in
registers as one ``BLOCK_D = next_pow2(D)`` tile, so each element is read once and written once.
Rows are addressed as ``[A, B, D]`` with two strides, which covers both ``[T, hidden]`` activations
and per-head norms on strided views (``q`` of Qwen3 is ``[T, H, D]`` sliced out of the QKV
output: its rows are not evenly strided when flattened, so a plain 2-D view would need a copy).

Numerics (the contract of ``updraft.ops``): sum of squares and ``rsqrt`` in float32; the
normalised row is rounded to the input dtype, then multiplied by the weight in float32 and rounded
to the output dtype ``promote(x.dtype, weight.dtype)``; with a residual, ``x + residual`` is
rounded to the input dtype before anything else reads it. For bf16/fp16 the weight product of two
bf16/fp16 values is exact in float32, so it rounds exactly as torch's ``weight * h.to(dtype)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import emulate_rne, num_warps, pdl_enter, pdl_opts, round_to

#: Largest normalised dim: one row is one register tile (65536 fp32 values over 16 warps).
MAX_DIM = 65536
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def normalise(xf, rstd, w, dt: tl.constexpr, out_dt: tl.constexpr, RNE: tl.constexpr):
    """The normalised values as ``ops.rmsnorm`` rounds them: ``xf * rstd`` (float32) rounded to
    ``dt``, its product with the weight ``w`` (float32) rounded to ``out_dt``."""
    return round_to(round_to(xf * rstd, dt, RNE).to(tl.float32) * w, out_dt, RNE)


@triton.jit
def _rmsnorm_kernel(
    X,
    Res,
    W,
    Out,
    ResOut,
    stride_xa,
    stride_xb,
    stride_ra,
    stride_rb,
    rows_b,
    eps,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_RES: tl.constexpr,
    RNE: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    row = tl.program_id(0).to(tl.int64)  # int64: rows * D overflows int32 on long prefills
    a = row // rows_b
    b = row % rows_b
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(X + a * stride_xa + b * stride_xb + cols, mask=mask, other=0.0)
    if HAS_RES:
        r = tl.load(Res + a * stride_ra + b * stride_rb + cols, mask=mask, other=0.0)
        # Round the sum to the input dtype (what the unfused `x + residual` stores) before the
        # statistics read it; the new residual stream is written in that dtype.
        x = round_to(x.to(tl.float32) + r.to(tl.float32), X.dtype.element_ty, RNE)
        tl.store(ResOut + row * D + cols, x, mask=mask)
    xf = x.to(tl.float32)
    mean_sq = tl.sum(xf * xf, axis=0) / D  # masked lanes loaded 0: they add nothing
    rstd = tl.rsqrt(mean_sq + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + row * D + cols, normalise(xf, rstd, w, X.dtype.element_ty, Out.dtype.element_ty, RNE), mask=mask)


def supported(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> bool:
    """Whether the kernel covers these inputs (else the caller uses the torch path)."""
    d = x.shape[-1] if x.dim() else 0
    ok = (
        x.dim() >= 1
        and x.dtype in DTYPES
        and weight.dtype in DTYPES
        and tuple(weight.shape) == (d,)
        and 0 < d <= MAX_DIM
        and x.device == weight.device
    )
    if residual is not None:
        ok = ok and residual.dtype == x.dtype and residual.shape == x.shape and residual.device == x.device
    return ok


def _as_3d(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[A, B, D]`` with a unit last stride, a view whenever one exists."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    if x.dim() == 1:
        return x.view(1, 1, -1)
    if x.dim() == 2:
        return x.unsqueeze(1)
    return x.reshape(-1, x.shape[-2], x.shape[-1])  # a no-op view for 3-D inputs


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RMSNorm over the last dim of ``x`` (any leading dims, any strides); with ``residual``, of
    ``x + residual``, also returned. Outputs are fresh contiguous tensors (never in place: callers
    keep references to the residual stream, e.g. EAGLE-3's captured layers and graph inputs)."""
    assert supported(x, weight, residual), "rmsnorm kernel: unsupported shapes/dtypes"
    d = x.shape[-1]
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    new_res = torch.empty(x.shape, dtype=x.dtype, device=x.device) if residual is not None else None
    if x.numel() == 0:
        return out, new_res
    x3 = _as_3d(x)
    r3 = _as_3d(residual) if residual is not None else x3
    rows = x3.shape[0] * x3.shape[1]
    block_d = triton.next_power_of_2(d)
    _rmsnorm_kernel[(rows,)](
        x3,
        r3,
        weight.contiguous(),
        out,
        new_res if new_res is not None else out,  # unused when HAS_RES is False
        x3.stride(0),
        x3.stride(1),
        r3.stride(0),
        r3.stride(1),
        x3.shape[1],
        float(eps),
        D=d,
        BLOCK_D=block_d,
        HAS_RES=residual is not None,
        RNE=emulate_rne(),
        num_warps=num_warps(block_d), **pdl_opts(x3.device, "elementwise"),
    )
    return out, new_res

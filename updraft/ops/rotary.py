"""Triton in-place rotary embedding (neox / rotate-half) of q and k in one launch.

Grid: one program per token. The program reads its position, loads that row of the
``[max_pos, D]`` table (``cat(cos, sin)`` over the D/2 frequencies) once, and rotates every q head
and every k head of the token: each head is a ``[heads, D/2]`` tile of first halves ``x1`` and one
of second halves ``x2``, rewritten as

    x1' = x1 * cos - x2 * sin        x2' = x2 * cos + x1 * sin

which is ``x * cat(cos, cos) + cat(-x2, x1) * cat(sin, sin)``, the unfused formula. Each product
is rounded to the tensor dtype before the sum, as the unfused torch code rounds it (the product
of two bf16/fp16 values is exact in float32, so bf16/fp16 results are bitwise torch's).

Hazards: q and k are updated in place (strided views such as slices of the QKV projection output
are fine, provided the last dim is contiguous and q and k do not overlap); positions must lie in
``[0, max_pos)`` -- there is no bounds check (a check would need a host sync; padded graph rows
carry position 0).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import emulate_rne, num_warps, pdl_enter, pdl_opts, round_to

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _rotate_heads(
    base,
    stride_h,
    cos,
    sin,
    d,
    d_mask,
    H: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    RNE: tl.constexpr,
):
    """Rotate heads ``[0, H)`` of one token row at ``base`` (head stride ``stride_h``)."""
    h = tl.arange(0, BLOCK_H)
    mask = (h[:, None] < H) & d_mask[None, :]
    p1 = base + h[:, None] * stride_h + d[None, :]
    p2 = p1 + HALF
    dt = base.dtype.element_ty
    o1, o2 = rotate_pair(tl.load(p1, mask=mask, other=0.0), tl.load(p2, mask=mask, other=0.0), cos, sin, dt, RNE)
    tl.store(p1, o1, mask=mask)
    tl.store(p2, o2, mask=mask)


@triton.jit
def cos_sin_row(CosSin, Pos, t, stride_cs, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """Token ``t``'s table row: (lanes ``d``, their mask, cos, sin), float32 ``[BLOCK_HALF]``."""
    pos = tl.load(Pos + t).to(tl.int64)
    d = tl.arange(0, BLOCK_HALF)
    d_mask = d < HALF
    row = CosSin + pos * stride_cs
    cos = tl.load(row + d, mask=d_mask, other=0.0).to(tl.float32)
    sin = tl.load(row + HALF + d, mask=d_mask, other=0.0).to(tl.float32)
    return d, d_mask, cos, sin


@triton.jit
def rotate_pair(x1, x2, cos, sin, dt: tl.constexpr, RNE: tl.constexpr):
    """First and second halves ``[heads, D/2]`` rotated by ``cos`` / ``sin`` ``[D/2]``, in
    ``dt``: every product rounded to ``dt`` first (no-ops for fp32), then the sum."""
    return rotate(x1, x2, cos[None, :], sin[None, :], dt, RNE)


@triton.jit
def rotate(x1, x2, c, s, dt: tl.constexpr, RNE: tl.constexpr):
    """``(x1 c - x2 s, x2 c + x1 s)`` with ``c``, ``s`` broadcastable to ``x1``: every product
    rounded to ``dt`` (no-ops for fp32), then the sum, as the unfused torch code rounds."""
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    o1 = round_to(x1 * c, dt, RNE).to(tl.float32) - round_to(x2 * s, dt, RNE).to(tl.float32)
    o2 = round_to(x2 * c, dt, RNE).to(tl.float32) + round_to(x1 * s, dt, RNE).to(tl.float32)
    return round_to(o1, dt, RNE), round_to(o2, dt, RNE)


@triton.jit
def _rotary_kernel(
    Q,
    K,
    Pos,
    CosSin,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_cs,
    HQ: tl.constexpr,
    HK: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    RNE: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    d, d_mask, cos, sin = cos_sin_row(CosSin, Pos, t, stride_cs, HALF, BLOCK_HALF)
    _rotate_heads(Q + t * stride_qt, stride_qh, cos, sin, d, d_mask, HQ, HALF, BLOCK_HQ, RNE)
    _rotate_heads(K + t * stride_kt, stride_kh, cos, sin, d, d_mask, HK, HALF, BLOCK_HK, RNE)


def supported(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> bool:
    """Whether the kernel covers these inputs (else the caller uses the torch path)."""
    return (
        q.dim() == 3
        and k.dim() == 3
        and q.shape[0] == k.shape[0] == positions.shape[0]
        and positions.dim() == 1
        and not positions.is_floating_point()
        and q.shape[2] == k.shape[2] == cos_sin.shape[-1]
        and q.shape[2] % 2 == 0
        and cos_sin.dim() == 2
        and q.dtype == k.dtype == cos_sin.dtype
        and q.dtype in DTYPES
        and q.stride(2) == 1
        and k.stride(2) == 1
        and cos_sin.stride(1) == 1
        and q.device == k.device == positions.device == cos_sin.device
    )


def rotary_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> None:
    """Rotate ``q`` [T, Hq, D] and ``k`` [T, Hkv, D] in place by ``positions`` [T] (int32/int64)."""
    assert supported(q, k, positions, cos_sin), "rotary kernel: unsupported shapes/dtypes/strides"
    t, hq, dim = q.shape
    hk = k.shape[1]
    if t == 0:
        return
    half = dim // 2
    block_half = triton.next_power_of_2(half)
    block_hq = triton.next_power_of_2(hq)
    block_hk = triton.next_power_of_2(hk)
    tile = 2 * (block_hq + block_hk) * block_half  # both halves of every q and k head
    _rotary_kernel[(t,)](
        q,
        k,
        positions,
        cos_sin,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        cos_sin.stride(0),
        HQ=hq,
        HK=hk,
        HALF=half,
        BLOCK_HQ=block_hq,
        BLOCK_HK=block_hk,
        BLOCK_HALF=block_half,
        RNE=emulate_rne(),
        num_warps=num_warps(tile, per_thread=8, max_warps=8), **pdl_opts(q.device, "elementwise"),
    )

"""Triton: MLA's new latent rows in one launch: the latent normalised, the rope key and the
queries' rope parts rotated, and (optionally) each row stored into the latent pool.

Per token ``t`` of ``kv`` [T, rank + rope] (the output of ``kv_a_proj_with_mqa``, rows contiguous
in their last dim): ``kv[t, :rank] = rmsnorm(kv[t, :rank]) * weight``, ``kv[t, rank:]`` and every
head of ``q_pe[t]`` rotated (neox halves) at ``positions[t]``, all in place; with a pool, the
finished row also goes to ``pool[loc[t], 0]``. Unfused, a DeepSeek layer ran the rotary kernel,
the norm, a ``torch.cat`` of the two parts and the backend's store: four launches where this is
one (the backend then attends with ``forward_stored``).

Numerics: the norm and the rotation round exactly where ``ops.rmsnorm`` and ``ops.rotary_`` do
(``ops`` module docstring): the result is bitwise the unfused kernels' (up to the rms sum's
order, which both take over the same tile).

Grid: one program per token; the token count is only the grid (one compiled kernel serves every
batch size). Hazards: ``kv`` and ``q_pe`` are written in place and must not overlap; positions
are not bounds-checked (padded graph rows carry position 0); ``loc`` holds valid pool slots for
every row (padded graph rows point at the reserved slot).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.ops.norm import normalise
from updraft.ops.rotary import _rotate_heads, cos_sin_row, rotate
from updraft.ops.triton_utils import emulate_rne, num_warps, pdl_enter, pdl_opts

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _latent_rows_kernel(KV, Q, Pos, CosSin, W, Pool, Loc, stride_kv, stride_qt, stride_qh, stride_cs, stride_pool, eps,
                        R: tl.constexpr, BLOCK_R: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                        H: tl.constexpr, BLOCK_H: tl.constexpr, STORE: tl.constexpr, RNE: tl.constexpr,
                        PDL: tl.constexpr):
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    dt = KV.dtype.element_ty
    row = KV + t * stride_kv
    # the latent: rms statistics in fp32, normalised value rounded before the weight (ops.rmsnorm)
    r = tl.arange(0, BLOCK_R)
    rmask = r < R
    xf = tl.load(row + r, mask=rmask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / R + eps)
    w = tl.load(W + r, mask=rmask, other=0.0).to(tl.float32)
    latent = normalise(xf, rstd, w, dt, dt, RNE)
    tl.store(row + r, latent, mask=rmask)
    # the rope key (one head) and the queries' rope parts, rotated as ops.rotary_ rotates them
    d, dmask, cos, sin = cos_sin_row(CosSin, Pos, t, stride_cs, HALF, BLOCK_HALF)
    k1 = tl.load(row + R + d, mask=dmask, other=0.0)
    k2 = tl.load(row + R + HALF + d, mask=dmask, other=0.0)
    o1, o2 = rotate(k1, k2, cos, sin, dt, RNE)
    tl.store(row + R + d, o1, mask=dmask)
    tl.store(row + R + HALF + d, o2, mask=dmask)
    _rotate_heads(Q + t * stride_qt, stride_qh, cos, sin, d, dmask, H, HALF, BLOCK_H, RNE)
    if STORE:
        slot = tl.load(Loc + t).to(tl.int64)
        dst = Pool + slot * stride_pool
        tl.store(dst + r, latent, mask=rmask)
        tl.store(dst + R + d, o1, mask=dmask)
        tl.store(dst + R + HALF + d, o2, mask=dmask)


def supported(kv: torch.Tensor, q_pe: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
              weight: torch.Tensor, rank: int, pool: torch.Tensor | None = None, loc: torch.Tensor | None = None) -> bool:
    """Whether the kernel covers these inputs (else the caller takes the unfused ops)."""
    rope = kv.shape[-1] - rank if kv.dim() == 2 else 0
    ok = (
        kv.dim() == 2 and q_pe.dim() == 3 and kv.shape[0] == q_pe.shape[0] == positions.shape[0]
        and rope > 0 and rope % 2 == 0 and q_pe.shape[2] == rope == cos_sin.shape[-1]
        and kv.dtype == q_pe.dtype == cos_sin.dtype == weight.dtype and kv.dtype in DTYPES
        and tuple(weight.shape) == (rank,) and weight.is_contiguous()
        and kv.stride(1) == 1 and q_pe.stride(2) == 1 and cos_sin.dim() == 2 and cos_sin.stride(1) == 1
        and positions.dim() == 1 and not positions.is_floating_point()
        and kv.device == q_pe.device == positions.device == cos_sin.device == weight.device
    )
    if pool is not None:
        ok = ok and (loc is not None and pool.dim() == 3 and pool.shape[1] == 1 and pool.shape[2] == kv.shape[1]
                     and pool.stride(2) == 1 and pool.dtype == kv.dtype and pool.device == kv.device
                     and loc.shape == positions.shape and not loc.is_floating_point())
    return ok


def latent_rows_(kv: torch.Tensor, q_pe: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
                 weight: torch.Tensor, eps: float, rank: int, pool: torch.Tensor | None = None,
                 loc: torch.Tensor | None = None) -> None:
    """See the module docstring (``supported`` must hold)."""
    assert supported(kv, q_pe, positions, cos_sin, weight, rank, pool, loc), "latent_rows_: unsupported inputs"
    t = kv.shape[0]
    if t == 0:
        return
    half = (kv.shape[1] - rank) // 2
    block_r = triton.next_power_of_2(rank)
    block_h = triton.next_power_of_2(q_pe.shape[1])
    block_half = triton.next_power_of_2(half)
    store = pool is not None
    _latent_rows_kernel[(t,)](
        kv, q_pe, positions, cos_sin, weight, pool if store else kv, loc if store else positions, kv.stride(0),
        q_pe.stride(0), q_pe.stride(1), cos_sin.stride(0), pool.stride(0) if store else 0, float(eps),
        R=rank, BLOCK_R=block_r, HALF=half, BLOCK_HALF=block_half, H=q_pe.shape[1], BLOCK_H=block_h, STORE=store,
        RNE=emulate_rne(), num_warps=num_warps(block_r + 2 * block_h * block_half, per_thread=8, max_warps=8),
        **pdl_opts(kv.device, "elementwise"),
    )

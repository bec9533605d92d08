"""Rotary embedding and the KV store in one launch (issue 14: one kernel less per layer).

``rope_store_(q, k, v, k_pool, v_pool, loc, positions, cos_sin)`` does what ``ops.rotary_(q, k,
positions, cos_sin)`` followed by ``store_kv(k, v, k_pool, v_pool, loc)`` does: q and k are rotated
in place (neox / rotate-half, every product rounded to the tensor dtype before the sum, exactly
as ``updraft.ops.rotary``), and the rotated k row and the v row of token ``t`` are written to
slot ``loc[t]`` of the pools, converted to the pool dtype. k is also written back in place: the
extend kernel reads the new tokens' keys from the tensor, not the pool.

Grid: one program per token. Padded graph rows carry ``loc = 0`` (the scratch slot) and position
0. Hazards as for both parts: q and k must not overlap; positions must lie in ``[0, max_pos)``
(no bounds check); slots are int64 before the stride multiply.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.attention.triton_kernels import next_pow2
from updraft.ops import rotary as rotary_kernels
from updraft.ops.triton_utils import emulate_rne, num_warps, pdl_enter, pdl_opts


@triton.jit
def _rope_store_kernel(Q, K, V, KPool, VPool, Loc, Pos, CosSin, stride_qt, stride_qh, stride_kt,
                       stride_kh, stride_vt, stride_vh, stride_ps, stride_ph, stride_pvs,
                       stride_pvh, stride_cs, HQ: tl.constexpr, HK: tl.constexpr,
                       HALF: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                       BLOCK_HALF: tl.constexpr, RNE: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(Loc + t).to(tl.int64)
    d, d_mask, cos, sin = rotary_kernels.cos_sin_row(CosSin, Pos, t, stride_cs, HALF, BLOCK_HALF)
    rotary_kernels._rotate_heads(Q + t * stride_qt, stride_qh, cos, sin, d, d_mask, HQ, HALF, BLOCK_HQ, RNE)
    # k: rotated as q is, written back in place and to the pool
    h = tl.arange(0, BLOCK_HK)
    mask = (h[:, None] < HK) & d_mask[None, :]
    p1 = K + t * stride_kt + h[:, None] * stride_kh + d[None, :]
    o1, o2 = rotary_kernels.rotate_pair(tl.load(p1, mask=mask, other=0.0), tl.load(p1 + HALF, mask=mask, other=0.0),
                                        cos, sin, K.dtype.element_ty, RNE)
    tl.store(p1, o1, mask=mask)
    tl.store(p1 + HALF, o2, mask=mask)
    kp = KPool + slot * stride_ps + h[:, None] * stride_ph + d[None, :]
    tl.store(kp, o1.to(KPool.dtype.element_ty), mask=mask)
    tl.store(kp + HALF, o2.to(KPool.dtype.element_ty), mask=mask)
    # v: copied to the pool (both halves of each row)
    vp = V + t * stride_vt + h[:, None] * stride_vh + d[None, :]
    pv = VPool + slot * stride_pvs + h[:, None] * stride_pvh + d[None, :]
    tl.store(pv, tl.load(vp, mask=mask).to(VPool.dtype.element_ty), mask=mask)
    tl.store(pv + HALF, tl.load(vp + HALF, mask=mask).to(VPool.dtype.element_ty), mask=mask)


def supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_pool: torch.Tensor,
              v_pool: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> bool:
    """Whether the fused kernel covers these inputs (the rotary kernel's conditions, v shaped
    like k with a contiguous last dim, pools with contiguous rows of k's heads and dim)."""
    return (
        rotary_kernels.supported(q, k, positions, cos_sin)
        and v.shape == k.shape
        and v.stride(2) == 1
        and k_pool.dim() == v_pool.dim() == 3
        and k_pool.shape[1:] == v_pool.shape[1:] == k.shape[1:]
        and k_pool.stride(2) == 1
        and v_pool.stride(2) == 1
    )


def rope_store_(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_pool: torch.Tensor,
                v_pool: torch.Tensor, loc: torch.Tensor, positions: torch.Tensor,
                cos_sin: torch.Tensor) -> None:
    """Rotate ``q`` [T, Hq, D] and ``k`` [T, Hkv, D] in place at ``positions`` [T] and write the
    rotated k and ``v`` to rows ``loc`` [T] of ``k_pool`` / ``v_pool`` [slots, Hkv, D]."""
    assert supported(q, k, v, k_pool, v_pool, positions, cos_sin), "rope_store: unsupported inputs"
    t, hq, dim = q.shape
    hk = k.shape[1]
    if t == 0:
        return
    assert loc.shape[0] == t, f"out_cache_loc has {loc.shape[0]} rows for {t} tokens"
    half = dim // 2
    block_half = next_pow2(half)
    tile = 2 * (next_pow2(hq) + 2 * next_pow2(hk)) * block_half
    _rope_store_kernel[(t,)](
        q, k, v, k_pool, v_pool, loc, positions, cos_sin, q.stride(0), q.stride(1), k.stride(0),
        k.stride(1), v.stride(0), v.stride(1), k_pool.stride(0), k_pool.stride(1), v_pool.stride(0),
        v_pool.stride(1), cos_sin.stride(0), HQ=hq, HK=hk, HALF=half, BLOCK_HQ=next_pow2(hq),
        BLOCK_HK=next_pow2(hk), BLOCK_HALF=block_half, RNE=emulate_rne(),
        num_warps=num_warps(tile, per_thread=8, max_warps=8), **pdl_opts(q.device, "attention"),
    )

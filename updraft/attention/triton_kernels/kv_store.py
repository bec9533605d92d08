"""Fused KV store: ``k_pool[loc[t]] = k[t]`` and ``v_pool[loc[t]] = v[t]`` in one launch.

Grid: one program per token row. Each program copies the ``[kv_heads, head_dim]`` K and V rows
of its token to slot ``loc[t]``, converting to the pool dtype. Padded graph rows carry
``loc = 0`` (the scratch slot), so they write there and nowhere else. A shared latent cache
(MLA: V is K's leading columns, ``KVPool.shared_kv``) stores K only (``v`` None: ``HAS_V`` off). Slots are int64 before they
are multiplied by the slot stride: ``num_slots * kv_heads * head_dim`` overflows int32 on large
pools.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.attention.triton_kernels import next_pow2
from updraft.ops.triton_utils import pdl_enter, pdl_opts


@triton.jit
def _kv_store_kernel(
    K,
    V,
    KPool,
    VPool,
    Loc,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ps,
    stride_ph,
    stride_pvs,
    stride_pvh,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_V: tl.constexpr, PDL: tl.constexpr,
):
    pdl_enter(PDL)
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(Loc + t).to(tl.int64)
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    m = (h[:, None] < NUM_KV_HEADS) & (d[None, :] < HEAD_DIM)
    k = tl.load(K + t * stride_kt + h[:, None] * stride_kh + d[None, :], mask=m)
    kp = KPool + slot * stride_ps + h[:, None] * stride_ph + d[None, :]
    tl.store(kp, k.to(KPool.dtype.element_ty), mask=m)
    if HAS_V:
        v = tl.load(V + t * stride_vt + h[:, None] * stride_vh + d[None, :], mask=m)
        vp = VPool + slot * stride_pvs + h[:, None] * stride_pvh + d[None, :]
        tl.store(vp, v.to(VPool.dtype.element_ty), mask=m)


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def store_kv(
    k: torch.Tensor, v: torch.Tensor | None, k_pool: torch.Tensor, v_pool: torch.Tensor | None, loc: torch.Tensor
) -> None:
    """Write ``k``/``v`` [T, kv_heads, head_dim] to rows ``loc`` [T] of ``k_pool``/``v_pool``
    ([num_slots, kv_heads, head_dim], last dim contiguous). ``v`` and ``v_pool`` None: K only."""
    num_tokens = k.shape[0]
    if num_tokens == 0:
        return
    has_v = v is not None and v_pool is not None
    k = _last_dim_contiguous(k)
    if v is None or v_pool is None:  # K only: K's tensors stand in as pointers that are never read
        v, v_pool = k, k_pool
    v = _last_dim_contiguous(v)
    assert k_pool.stride(-1) == 1 and v_pool.stride(-1) == 1, "KV pool rows must be contiguous"
    assert loc.shape[0] == num_tokens, f"out_cache_loc has {loc.shape[0]} rows for {num_tokens} tokens"
    _, hkv, dim = k.shape
    _kv_store_kernel[(num_tokens,)](
        k,
        v,
        k_pool,
        v_pool,
        loc,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_pool.stride(0),
        k_pool.stride(1),
        v_pool.stride(0),
        v_pool.stride(1),
        NUM_KV_HEADS=hkv,
        HEAD_DIM=dim,
        BLOCK_H=next_pow2(hkv),
        BLOCK_D=next_pow2(dim),
        HAS_V=has_v,
        num_warps=4 if hkv * dim >= 1024 else 1, **pdl_opts(k.device, "attention"),
    )

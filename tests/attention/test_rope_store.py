"""The fused rotary + KV store (``triton_kernels.rope_store``) against its two parts run one after
the other (``ops.rotary_``, then ``store_kv``): q and k rotated in place and the pools' rows, bit
for bit, in fp32 and bf16 (the interpreter emulates the GPU's round-to-nearest-even), with GQA
heads, strided q/k/v views of one QKV output, a padded row writing the scratch slot, a bf16
pool under fp32 tensors. The model path through the triton backend (``forward(..., rope=...)``)
is covered end to end by the engine and kit tests that run that backend."""

from __future__ import annotations

import pytest
import torch

from updraft import ops
from updraft.attention.triton_kernels import rope_store
from updraft.attention.triton_kernels.kv_store import store_kv
from updraft.models.config import RopeScaling
from updraft.models.layers import RotaryEmbedding

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _case(dtype: torch.dtype, pool_dtype: torch.dtype, tokens: int, hq: int, hk: int, dim: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, (hq + 2 * hk) * dim, generator=g).to(dtype).to(DEV)
    q, k, v = qkv.split([hq * dim, hk * dim, hk * dim], dim=-1)
    q, k, v = (x.view(tokens, -1, dim) for x in (q, k, v))  # strided views, as the model passes
    rot = RotaryEmbedding(dim, 4096, 10000.0, RopeScaling())
    rot.build(torch.device(DEV), dtype)
    positions = torch.randint(0, 4096, (tokens,), generator=g).to(DEV)
    positions[-1] = 0  # a padded graph row: position 0, slot 0
    slots = 64
    loc = torch.randperm(slots - 1, generator=g)[:tokens].add(1).to(DEV)
    loc[-1] = 0
    pools = [torch.full((slots, hk, dim), 7.0, dtype=pool_dtype, device=DEV) for _ in range(2)]
    return qkv, q, k, v, pools, loc, positions, rot.cos_sin


@pytest.mark.parametrize("dtype,pool_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                              (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("tokens,hq,hk,dim", [(5, 4, 2, 16), (3, 9, 3, 64), (1, 2, 1, 8)])
def test_rope_store_equals_rotary_then_store(dtype: torch.dtype, pool_dtype: torch.dtype, tokens: int, hq: int,
                                             hk: int, dim: int) -> None:
    got_qkv, q, k, v, (kp, vp), loc, pos, cs = _case(dtype, pool_dtype, tokens, hq, hk, dim, tokens * 7 + hq)
    want_qkv, q2, k2, v2, (kp2, vp2), *_ = _case(dtype, pool_dtype, tokens, hq, hk, dim, tokens * 7 + hq)
    assert rope_store.supported(q, k, v, kp, vp, pos, cs)
    rope_store.rope_store_(q, k, v, kp, vp, loc, pos, cs)
    with ops.use_backend("triton"):
        ops.rotary_(q2, k2, pos, cs)
    store_kv(k2, v2, kp2, vp2, loc)
    assert torch.equal(got_qkv, want_qkv)  # q, k rotated in place, v untouched
    assert torch.equal(kp, kp2) and torch.equal(vp, vp2)
    untouched = torch.ones(kp.shape[0], dtype=torch.bool, device=DEV)
    untouched[loc] = False
    assert kp[untouched].eq(7.0).all() and vp[untouched].eq(7.0).all()


def test_rope_store_refuses_what_it_does_not_cover() -> None:
    _, q, k, v, (kp, vp), loc, pos, cs = _case(torch.float32, torch.float32, 4, 4, 2, 16, 1)
    assert not rope_store.supported(q, k, v[:, :1], kp, vp, pos, cs)  # v shaped unlike k
    assert not rope_store.supported(q, k, v, kp[:, :, :8], vp, pos, cs)  # pool rows of another dim
    assert not rope_store.supported(q, k, v, kp, vp, pos.float(), cs)  # float positions

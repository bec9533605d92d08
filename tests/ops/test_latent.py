"""``ops.latent_rows_`` (MLA's new latent rows in one kernel) under the interpreter: against the
unfused ops it replaces (``reference.rmsnorm``, ``reference.rotary_``, a store at ``loc``) and a
float64 computation, with and without the pool; the dispatch's refusals."""

from __future__ import annotations

import pytest
import torch

from tests.ops.test_ops import (
    TOL,
    assert_same_roundings,
    needs_interpreter,
    randn,
    rel_err,
    rmsnorm64,
    rope_table,
    rotary64,
)
from updraft import ops
from updraft.ops import reference

DTYPES = [torch.float32, torch.bfloat16]


def _case(tokens: int, heads: int, rank: int, rope: int, dtype: torch.dtype, seed: int = 0):
    kv = randn(tokens, rank + rope, dtype=dtype, seed=seed, scale=3.0)
    q = randn(tokens, heads, 24 + rope, dtype=dtype, seed=seed + 1)  # nope columns first, as DeepSeek's q
    w = (1 + randn(rank, dtype=torch.float32, seed=seed + 2, scale=0.2)).to(dtype)
    table = rope_table(300, rope, dtype)
    pos = torch.randperm(300, generator=torch.Generator().manual_seed(seed + 3))[:tokens]
    return kv, q, w, table, pos


def _unfused(kv: torch.Tensor, q: torch.Tensor, w: torch.Tensor, table: torch.Tensor, pos: torch.Tensor, rank: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """What the DeepSeek layer computed before: rotary in place, the norm, ``cat``."""
    kv, q = kv.clone(), q.clone()
    q_pe = q[..., -(kv.shape[1] - rank):]
    reference.rotary_(q_pe, kv[:, None, rank:], pos, table)
    row = torch.cat([reference.rmsnorm(kv[:, :rank], w, 1e-6), kv[:, rank:]], dim=-1)
    return row, q


@needs_interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tokens,heads,rank,rope", [(1, 16, 512, 64), (5, 3, 32, 16), (9, 8, 96, 32)])
@pytest.mark.parametrize("store", [True, False])
def test_latent_rows_match_the_unfused_ops(dtype: torch.dtype, tokens: int, heads: int, rank: int, rope: int,
                                           store: bool) -> None:
    kv, q, w, table, pos = _case(tokens, heads, rank, rope, dtype)
    row_ref, q_ref = _unfused(kv, q, w, table, pos, rank)
    kv64 = torch.cat([rmsnorm64(kv[:, :rank], w, 1e-6), rotary64(kv[:, None, rank:], pos, table)[:, 0]], dim=-1)
    q_pe64 = rotary64(q[..., -rope:], pos, table)
    nope = q[..., :-rope].clone()
    pool = randn(40, 1, rank + rope, dtype=dtype, seed=9) if store else None
    pool_before = pool.clone() if store else None
    loc = torch.randperm(40, generator=torch.Generator().manual_seed(10))[:tokens] if store else None
    with ops.use_backend("triton"):
        ran = ops.latent_rows_(kv, q[..., -rope:], pos.to(torch.int32 if tokens % 2 else torch.int64), table, w, 1e-6,
                               rank, pool, loc)
    assert ran
    assert torch.equal(q[..., :-rope], nope), "the query's nope columns are not the kernel's"
    assert rel_err(kv, kv64) <= TOL[dtype] and rel_err(q[..., -rope:], q_pe64) <= TOL[dtype]
    if dtype == torch.float32:
        assert rel_err(kv, row_ref) <= 1e-6 and torch.allclose(q, q_ref, rtol=0, atol=1e-6)
    else:  # the rotations are bitwise torch's; the norm rounds where torch rounds
        assert torch.equal(kv[:, rank:], row_ref[:, rank:]) and torch.equal(q, q_ref)
        assert_same_roundings(kv[:, :rank], row_ref[:, :rank])
    if store:
        assert pool is not None and pool_before is not None and loc is not None
        assert torch.equal(pool[loc, 0], kv), "each finished row at its slot"
        others = torch.ones(40, dtype=torch.bool)
        others[loc] = False
        assert torch.equal(pool[others], pool_before[others]), "no other slot written"


@needs_interpreter
def test_latent_rows_refusals() -> None:
    """CPU "auto" does nothing (the caller's unfused ops run); the forced kernel refuses inputs it
    does not cover (a weight of another dtype: the unfused norm would promote) instead of running."""
    kv, q, w, table, pos = _case(3, 4, 32, 16, torch.bfloat16)
    kv0, q0 = kv.clone(), q.clone()
    assert not ops.latent_rows_(kv, q[..., -16:], pos, table, w, 1e-6, 32)
    assert torch.equal(kv, kv0) and torch.equal(q, q0)
    with ops.use_backend("triton"), pytest.raises(ValueError, match="no kernel covers"):
        ops.latent_rows_(kv, q[..., -16:], pos, table, w.float(), 1e-6, 32)
    with ops.use_backend("triton"), pytest.raises(ValueError, match="no kernel covers"):
        ops.latent_rows_(kv, q[..., -16:], pos, table, w, 1e-6, 32, torch.zeros(8, 1, 40, dtype=torch.bfloat16),
                         torch.arange(3))  # a pool row narrower than the latent row

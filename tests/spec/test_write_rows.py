"""``write_rows`` (one launch for a fixed-stride batch's inputs) and ``read_rows`` against torch, on
the Triton interpreter: every field, both id layouts, mixed dtypes, table rows out of order."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)

from updraft.spec import device_rng  # noqa: E402
from updraft.spec.write_rows import UniformDraw, read_rows, write_rows, write_rows_torch  # noqa: E402


def batch(bs: int, w: int) -> SimpleNamespace:
    n = bs * w
    return SimpleNamespace(stride=w, input_ids=torch.full((n,), -1, dtype=torch.int64),
                           positions=torch.full((n,), -1, dtype=torch.int64),
                           out_cache_loc=torch.full((n,), -1, dtype=torch.int64),
                           req_pool_indices=torch.full((bs,), -1, dtype=torch.int64),
                           seq_lens=torch.full((bs,), -1, dtype=torch.int32))


@pytest.mark.parametrize("w,flat_ids,offset", [(1, True, 0), (1, False, -2), (6, False, -1), (3, False, 2)])
@pytest.mark.parametrize("column", [False, True])
def test_write_rows_matches_torch(w: int, flat_ids: bool, offset: int, column: bool) -> None:
    """``column``: one token a row read from a column of a wider block (the chain's draft tokens
    in the verify block's ids: stride S + 1), taken in place."""
    gen = torch.Generator().manual_seed(w)
    bs, width = 5, 40
    table = torch.randperm(8 * width, generator=gen).reshape(8, width)
    rows = torch.tensor([6, 0, 3, 7, 1])
    first = torch.randint(2, width - w - 2, (bs,), generator=gen)
    ids = torch.randint(0, 1000, (bs,) if flat_ids else (bs, w), generator=gen)
    if not flat_ids and w > 1:
        ids = ids.t().contiguous().t()  # a non-contiguous [bs, w] view
    if column and w == 1:
        block = torch.randint(0, 1000, (bs, 6), generator=gen)
        ids = block[:, 3] if flat_ids else block[:, 3:4]
    got, want = batch(bs, w), batch(bs, w)
    write_rows(got, rows, first, ids, table, offset)  # type: ignore[arg-type]
    write_rows_torch(want, rows, first, ids, table, offset)  # type: ignore[arg-type]
    for field in ("input_ids", "positions", "out_cache_loc", "req_pool_indices", "seq_lens"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field
    assert torch.equal(got.out_cache_loc.view(bs, w)[:, 0], table[rows, first + offset])
    assert torch.equal(got.seq_lens, (first + offset + w).int())


@pytest.mark.parametrize("feat_dim,with_params", [(0, False), (24, True), (5000, False)])
def test_read_rows_matches_gathers(feat_dim: int, with_params: bool) -> None:
    """``read_rows`` against the torch gathers: every output, rows out of order and repeated (the
    padding row), a feature wider than one block (5000 > 4096), bf16 features."""
    gen = torch.Generator().manual_seed(feat_dim)
    num = 9
    seq_len = torch.randint(1, 1000, (num,), generator=gen)
    bonus = torch.randint(0, 50000, (num,), generator=gen)
    feat = torch.randn(num, feat_dim, generator=gen).to(torch.bfloat16) if feat_dim else None
    params = torch.rand(num, 7, generator=gen) if with_params else None
    rows = torch.tensor([4, 0, 8, 0, 2])
    got = read_rows(rows, seq_len, bonus, feat, params)
    n, b, f, p = got.seq_len, got.bonus, got.feat, got.params
    assert got.uniforms is None
    assert torch.equal(n, seq_len[rows]) and torch.equal(b, bonus[rows])
    assert (f is None) == (feat is None) and (p is None) == (params is None)
    if feat is not None:
        assert f is not None and f.dtype == feat.dtype and torch.equal(f, feat[rows])
    if params is not None:
        assert p is not None and torch.equal(p, params[rows])


@pytest.mark.parametrize("n", [2, 12, 33])
def test_read_rows_draws_the_uniforms_bit_for_bit(n: int) -> None:
    """With a draw, ``read_rows`` also returns ``device_rng.uniform`` of the rows' RNG keys, bit
    for bit: keys read in place from strided columns of a [rows, 2] table (as ``RowState.rng``),
    rows out of order and repeated, seeds past 2**32, a stream whose constant needs 64 bits."""
    gen = torch.Generator().manual_seed(n)
    num = 9
    rng = torch.stack([torch.randint(0, 2**40, (num,), generator=gen), torch.randint(0, 1000, (num,), generator=gen)], 1)
    rows = torch.tensor([4, 0, 8, 0, 2])
    for stream in (1000, 2**33 + 5):
        got = read_rows(rows, torch.zeros(num, dtype=torch.long), torch.zeros(num, dtype=torch.long),
                        draw=UniformDraw(rng[:, 0], rng[:, 1], stream, n))
        want = device_rng.uniform(rng[rows, 0], rng[rows, 1], stream, n)
        assert got.uniforms is not None and got.uniforms.dtype == torch.float32
        assert torch.equal(got.uniforms, want)

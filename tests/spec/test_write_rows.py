"""``write_rows`` (one launch for a fixed-stride batch's inputs) against its torch reference, on
the Triton interpreter: every field, both id layouts, mixed dtypes, table rows out of order."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)

from updraft.spec.write_rows import write_rows, write_rows_torch  # noqa: E402


def batch(bs: int, w: int) -> SimpleNamespace:
    n = bs * w
    return SimpleNamespace(stride=w, input_ids=torch.full((n,), -1, dtype=torch.int64),
                           positions=torch.full((n,), -1, dtype=torch.int64),
                           out_cache_loc=torch.full((n,), -1, dtype=torch.int64),
                           req_pool_indices=torch.full((bs,), -1, dtype=torch.int64),
                           seq_lens=torch.full((bs,), -1, dtype=torch.int32))


@pytest.mark.parametrize("w,flat_ids,offset", [(1, True, 0), (1, False, -2), (6, False, -1), (3, False, 2)])
def test_write_rows_matches_torch(w: int, flat_ids: bool, offset: int) -> None:
    gen = torch.Generator().manual_seed(w)
    bs, width = 5, 40
    table = torch.randperm(8 * width, generator=gen).reshape(8, width)
    rows = torch.tensor([6, 0, 3, 7, 1])
    first = torch.randint(2, width - w - 2, (bs,), generator=gen)
    ids = torch.randint(0, 1000, (bs,) if flat_ids else (bs, w), generator=gen)
    if not flat_ids and w > 1:
        ids = ids.t().contiguous().t()  # a non-contiguous [bs, w] view
    got, want = batch(bs, w), batch(bs, w)
    write_rows(got, rows, first, ids, table, offset)  # type: ignore[arg-type]
    write_rows_torch(want, rows, first, ids, table, offset)  # type: ignore[arg-type]
    for field in ("input_ids", "positions", "out_cache_loc", "req_pool_indices", "seq_lens"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field
    assert torch.equal(got.out_cache_loc.view(bs, w)[:, 0], table[rows, first + offset])
    assert torch.equal(got.seq_lens, (first + offset + w).int())

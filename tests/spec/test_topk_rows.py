"""``sampling_kernels.topk_rows`` against ``torch.topk`` and its own reference.

Every result is compared exactly with ``topk_rows_reference`` (a stable descending sort: the
kernel's documented order, ties by ascending index) and with ``torch.topk``: the same values
always, the same indices wherever the value occurs once in its row (torch orders ties its own
way). With ties the indices must also be a valid top-k: distinct, pointing at the values
returned. Without CUDA the kernel runs under the Triton interpreter (tests/conftest.py turns it
on), one program at a time."""

from __future__ import annotations

import math

import pytest
import torch

from updraft.spec import sampling_kernels as sk

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def test_kernel_is_what_runs() -> None:
    # Otherwise every comparison below would compare the torch reference with itself.
    assert sk.use_triton(torch.empty(0, device=DEV))


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN where the other is NaN."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def check(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the kernel on ``x`` [B, V] and check it against both references; returns its result."""
    vals, idx = sk.topk_rows(x, k)
    assert vals.shape == idx.shape == (x.shape[0], k)
    assert vals.dtype == torch.float32 and idx.dtype == torch.int64
    rv, ri = sk.topk_rows_reference(x, k)
    assert same(vals, rv) and torch.equal(idx, ri)
    # A valid top-k: distinct indices whose (float32) values are the ones returned, descending.
    xf = x.float()
    assert all(len(set(r.tolist())) == k for r in idx)
    assert same(xf.gather(1, idx), vals)
    order = vals.nan_to_num(nan=math.inf, posinf=math.inf, neginf=-math.inf)  # NaN first
    assert bool((order[:, :-1] >= order[:, 1:]).all())
    if not xf.isnan().any():
        tv, ti = xf.topk(k, dim=-1)
        assert torch.equal(vals, tv)
        once = (xf[:, None, :] == vals[:, :, None]).sum(-1) == 1  # [B, k]: value occurs once in its row
        assert torch.equal(idx[once], ti[once])
    return vals, idx


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [1, 64])
@pytest.mark.parametrize("b,v", [(1, 8192), (8, 8192), (8, 1000), (1, 64), (8, 65)])
def test_random_rows(dtype: torch.dtype, k: int, b: int, v: int) -> None:
    # bf16 rows of 8192 normals hold many equal values, ties at the k-th included.
    g = torch.Generator().manual_seed(b * 100_000 + v * 10 + k)
    x = (torch.randn(b, v, generator=g) * 4).to(dtype).to(DEV)
    check(x, k)


@pytest.mark.parametrize("v", [16384, 8192, 1000])
def test_many_ties_at_the_kth(v: int) -> None:
    # Values from a handful of levels: the 64th value has hundreds of copies, some above it too.
    g = torch.Generator().manual_seed(v)
    x = torch.randint(0, 5, (8, v), generator=g).float()
    x[1] = 7.0  # every value equal: the first 64 indices
    x[2, :] = 0.0
    x[2, v - 3:] = 1.0  # three above, then the ties in index order from 0
    x[3] = torch.where(torch.arange(v) % 2 == 0, -0.0, 0.0)  # -0.0 and +0.0 tie
    # (a full row of 16384 equal values: the search's counts reach 2**14, packed 16 bits each)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        vals, idx = check(x.to(dtype).to(DEV), 64)
        assert torch.equal(idx[1].cpu(), torch.arange(64))
        assert idx[2, :3].tolist() == [v - 3, v - 2, v - 1] and torch.equal(idx[2, 3:].cpu(), torch.arange(61))
        assert torch.equal(idx[3].cpu(), torch.arange(64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_search_bounds_at_the_extremes(dtype: torch.dtype) -> None:
    """The search starts between the smallest of the group maxima and the largest value: rows
    whose top spans every magnitude of the dtype (float32 keys whose range overflows int32), rows
    where one group holds the whole top (the bound sits far below it), a row whose groups all
    peak at one value (the bound is the answer) and rows shorter than a power of two (padding
    groups at the minimum)."""
    g = torch.Generator().manual_seed(3)
    v = 4096
    big = torch.finfo(dtype).max
    x = torch.randn(6, v, generator=g) * 4
    x[0] = torch.logspace(-30, 30, v) * torch.where(torch.arange(v) % 2 == 0, 1.0, -1.0)
    x[0, :5] = torch.tensor([big, -big, 1e-38, -1e-38, 0.0])
    x[1] = -1000.0
    x[1, 100:300] = torch.linspace(50, 60, 200)  # the whole top in two of 64 groups
    x[2] = torch.arange(v) % 64 == 0  # every group of 64 peaks at 1.0, exactly 64 ones
    for k in (1, 64):
        check(x.to(dtype).to(DEV), k)
        check(x[:, :v - 7].to(dtype).to(DEV), k)


def test_inf_rows() -> None:
    # -inf is an ordinary (smallest) value: selected, by index, when fewer than k are finite.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 1000, generator=g)
    x[0, 10:] = -math.inf  # 10 finite, then -inf from index 10 on
    x[1] = -math.inf
    x[2, ::3] = -math.inf
    x[3, 500] = math.inf
    x[3, 7] = math.inf
    x[4, :990] = -math.inf
    # (a full row of 16384 equal values: the search's counts reach 2**14, packed 16 bits each)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        vals, idx = check(x.to(dtype).to(DEV), 64)
        assert torch.equal(idx[0, 10:].cpu(), torch.arange(10, 64))
        assert torch.equal(idx[1].cpu(), torch.arange(64))
        assert idx[3, :2].tolist() == [7, 500]


def test_float64_rows_are_ranked_by_their_float32_rounding() -> None:
    # Rounding is monotone, so the float32 roundings of the true k largest are the values.
    g = torch.Generator().manual_seed(4)
    x = torch.randn(8, 8192, generator=g, dtype=torch.float64)
    x[1, :100] = 10.0 + torch.arange(100, dtype=torch.float64) * 1e-12  # distinct, equal in float32
    x = x.to(DEV)
    vals, idx = sk.topk_rows(x, 64)
    assert torch.equal(vals, x.topk(64, dim=-1).values.float())
    assert torch.equal(idx, sk.topk_rows_reference(x, 64)[1])
    assert torch.equal(idx[1].cpu(), torch.arange(64))  # ties in float32: by index


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nan_ranks_first(dtype: torch.dtype) -> None:
    x = torch.randn(2, 100, generator=torch.Generator().manual_seed(5))
    x[0, 40] = math.nan
    x[0, 3] = -math.nan  # a sign-bit NaN: still ranks first (every NaN is made +NaN)
    x[1, 9] = math.inf
    x[1, 50] = math.nan
    vals, idx = check(x.to(dtype).to(DEV), 4)
    assert idx[0, :2].tolist() == [3, 40] and bool(vals[0, :2].isnan().all())
    assert idx[1, :2].tolist() == [50, 9] and vals[1, 1] == math.inf


def test_strided_rows_and_out_buffers() -> None:
    # Rows of a wider tensor in, one draft step's slices of [B, S, K] buffers out.
    g = torch.Generator().manual_seed(6)
    wide = torch.randn(8, 3000, generator=g).to(torch.bfloat16).to(DEV)
    wide[0] = 1.0  # ties at the k-th: a selection one too long would write past the slice
    wide[1, 100:300] = 5.0
    x = wide[:, 100:2100]
    out_v = torch.full((8, 5, 64), 9.0, device=DEV)
    out_i = torch.full((8, 5, 64), -1, dtype=torch.long, device=DEV)
    vals, idx = sk.topk_rows(x, 64, out_vals=out_v[:, 2], out_idx=out_i[:, 2])
    assert vals.data_ptr() == out_v[:, 2].data_ptr() and idx.data_ptr() == out_i[:, 2].data_ptr()
    rv, ri = sk.topk_rows_reference(x, 64)
    assert torch.equal(out_v[:, 2], rv) and torch.equal(out_i[:, 2], ri)
    assert bool((out_v[:, [0, 1, 3, 4]] == 9.0).all()) and bool((out_i[:, [0, 1, 3, 4]] == -1).all())


def test_topk_rows_maps_indices_to_target_ids() -> None:
    """The draft vocabulary's map applied in the same launch: ``idx + d2t[idx]`` (EAGLE-3) or
    ``hot_ids[idx]`` (a token map), the values and their order unchanged."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(3, 500, generator=gen).to(torch.bfloat16)
    d2t = torch.randint(0, 3000, (500,), generator=gen)
    hot = torch.randperm(9000, generator=gen)[:500]
    vals, idx = sk.topk_rows(x, 16)
    v_add, i_add = sk.topk_rows(x, 16, target=(d2t, True))
    v_dir, i_dir = sk.topk_rows(x, 16, target=(hot, False))
    assert torch.equal(v_add, vals) and torch.equal(v_dir, vals)
    assert torch.equal(i_add, idx + d2t[idx]) and torch.equal(i_dir, hot[idx])

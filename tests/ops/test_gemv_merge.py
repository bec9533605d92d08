"""``gemv_merge.merge_linear_add_norm`` (split merge + o_proj + residual add + the next norm's rows
in one launch) under the interpreter, against a float64 merge and product written here, and
against the two launches it replaces (``merge_splits`` + ``gemv.linear_add_norm``): FMA (1-2 rows)
and tensor-core tiles (3-64 rows), dead splits holding garbage, a row with no live split, several
column tiles, repeats bit for bit, tickets back at 0, and what it refuses.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)
pytest.importorskip("triton")

from updraft.attention.triton_kernels.merge import merge_splits  # noqa: E402
from updraft.ops import gemv, gemv_merge  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _inputs(m: int, heads: int, splits: int, d: int, n: int, live: list[int], dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mid_o = torch.randn(m, heads, splits, d, generator=g)
    lse = torch.randn(m, heads, splits, generator=g) * 3
    for t in range(m):
        lse[t, :, live[t]:] = float("-inf")
        mid_o[t, :, live[t]:] = float("nan")  # a dead split's partial is never read
    w = (torch.randn(n, heads * d, generator=g) / math.sqrt(heads * d)).to(dtype)
    res = torch.randn(m, n, generator=g).to(dtype)
    nw = (1 + 0.1 * torch.randn(n, generator=g)).to(dtype)
    return mid_o, lse, w, res, nw


def _reference(mid_o: torch.Tensor, lse: torch.Tensor, w: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
    """float64: merge (weights 2^lse over live splits), product, residual add."""
    m, heads, _, d = mid_o.shape
    o = torch.where(torch.isfinite(lse)[..., None], mid_o.double(), 0.0)
    wts = torch.where(torch.isfinite(lse), torch.exp2(lse.double()), 0.0)
    den = wts.sum(-1, keepdim=True)
    merged = (wts[..., None] * o).sum(2) / torch.where(den == 0, 1.0, den)
    return merged.reshape(m, heads * d) @ w.double().T + res.double()


def _err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 2, 6, 20])
def test_against_float64_and_two_launches(dtype: torch.dtype, m: int) -> None:
    heads, splits, d, n = 3, 6, 16, 80  # 80 columns: several tiles, the last ragged
    live = [1 + (t * 5) % splits for t in range(m)]
    mid_o, lse, w, res, nw = _inputs(m, heads, splits, d, n, live, dtype)
    got = gemv_merge.merge_linear_add_norm(mid_o, lse, w, res, nw, 1e-5)
    ref = _reference(mid_o, lse, w, res)
    assert _err(got.stream, ref) < TOL[dtype]
    # the stream's rows ready for the norm after it, as linear_add_norm leaves them
    s = got.stream.double()
    assert torch.allclose(got.scaled.double(), s * nw.double(), rtol=TOL[dtype], atol=TOL[dtype])
    assert torch.allclose(got.sumsq.sum(1).double(), (s * s).sum(1), rtol=1e-5)
    assert got.sumsq.shape == (m, -(-n // gemv_merge._tile(m)[0])) and got.eps == 1e-5
    x = torch.empty(m, heads, d, dtype=dtype)
    merge_splits(mid_o, lse, x)
    two = gemv.linear_add_norm(x.view(m, heads * d), w, res, nw, 1e-5)
    assert _err(got.stream, two.stream.double()) < TOL[dtype]


def test_row_without_keys_and_repeats() -> None:
    """A row whose every split is empty merges to 0 (its stream is the residual); a second launch
    equals the first bit for bit and every ticket is back at 0."""
    m, heads, splits, d, n = 6, 3, 5, 16, 72
    mid_o, lse, w, res, nw = _inputs(m, heads, splits, d, n, [0, 2, 5, 1, 0, 3], torch.float32, seed=1)
    a = gemv_merge.merge_linear_add_norm(mid_o, lse, w, res, nw, 1e-6)
    b = gemv_merge.merge_linear_add_norm(mid_o, lse, w, res, nw, 1e-6)
    assert torch.equal(a.stream[0], res[0]) and torch.equal(a.stream[4], res[4])
    assert torch.equal(a.stream, b.stream) and torch.equal(a.scaled, b.scaled) and torch.equal(a.sumsq, b.sumsq)
    assert int(gemv_merge._ticket_buffer(torch.device("cpu")).abs().sum()) == 0
    assert _err(a.stream, _reference(mid_o, lse, w, res)) < TOL[torch.float32]


def test_stream_out_and_strided_residual() -> None:
    m, heads, splits, d, n = 3, 2, 4, 32, 40
    mid_o, lse, w, res, nw = _inputs(m, heads, splits, d, n, [4, 1, 3], torch.float32, seed=2)
    wide = torch.zeros(m, 2 * n)
    wide[:, n:] = res
    out = torch.full((m, 3 * n), 7.0)
    got = gemv_merge.merge_linear_add_norm(mid_o, lse, w, wide[:, n:], nw, 1e-5, stream_out=out[:, :n])
    assert got.stream.data_ptr() == out.data_ptr() and torch.all(out[:, n:] == 7.0)
    assert _err(out[:, :n], _reference(mid_o, lse, w, res)) < TOL[torch.float32]


def test_refuses() -> None:
    mid_o, lse, w, res, nw = _inputs(2, 2, 4, 16, 32, [4, 4], torch.float32)
    assert gemv_merge.supported(mid_o, lse, w, res)
    assert not gemv_merge.supported(mid_o[..., :12], lse, w[:, :24], res)  # head dim 12: not a power of two
    assert not gemv_merge.supported(mid_o.double(), lse, w, res)
    assert not gemv_merge.supported(mid_o, lse, w.to(torch.bfloat16), res)
    assert not gemv_merge.supported(mid_o, lse[:, :1], w, res)
    big = torch.zeros(65, 2, 4, 16)
    assert not gemv_merge.supported(big, torch.zeros(65, 2, 4), w, torch.zeros(65, 32))
    with pytest.raises(ValueError, match="unsupported inputs"):
        gemv_merge.merge_linear_add_norm(mid_o, lse, w.to(torch.bfloat16), res, nw, 1e-5)
    with pytest.raises(ValueError, match="norm weight"):
        gemv_merge.merge_linear_add_norm(mid_o, lse, w, res, nw[:5], 1e-5)
    with pytest.raises(ValueError, match="stream_out"):
        gemv_merge.merge_linear_add_norm(mid_o, lse, w, res, nw, 1e-5, stream_out=torch.empty(2, 33))
    with pytest.raises(ValueError, match="tile"):
        gemv_merge.merge_linear_add_norm(mid_o, lse, w, res, nw, 1e-5, tile=(24, 4))

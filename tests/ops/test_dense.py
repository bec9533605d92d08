"""``ops.dense``: the CPU float32 path equals ``F.linear`` to rounding at every row count and
layout, and every other device or dtype takes ``F.linear`` itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from updraft import ops
from updraft.models.layers import Linear, MergedLinear


def _ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    out = x.double() @ w.double().t()
    return out + b.double() if b is not None else out


@pytest.mark.parametrize("rows", [0, 1, 2, 3, 7, 33, 64, 65])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_a_float64_product(rows: int, bias: bool) -> None:
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(97, 40, generator=g)
    b = torch.randn(97, generator=g) if bias else None
    x = torch.randn(rows, 40, generator=g)
    out = ops.dense(x, w, b)
    assert out.shape == (rows, 97) and out.dtype == torch.float32 and out.is_contiguous()
    torch.testing.assert_close(out.double(), _ref(x, w, b), atol=1e-5, rtol=1e-5)


def test_large_batches_are_f_linear() -> None:
    """Past ``MAX_ROWS`` (prefill) MKL's own GEMM is faster: the same call, bit for bit."""
    from updraft.ops.dense import MAX_ROWS

    g = torch.Generator().manual_seed(4)
    w, x = torch.randn(30, 16, generator=g), torch.randn(MAX_ROWS + 1, 16, generator=g)
    assert torch.equal(ops.dense(x, w), F.linear(x, w))


def test_leading_dims_vectors_and_strided_inputs() -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(24, 16, generator=g)
    x = torch.randn(2, 3, 16, generator=g)
    torch.testing.assert_close(ops.dense(x, w), F.linear(x, w), atol=1e-5, rtol=1e-5)
    v = torch.randn(16, generator=g)
    assert ops.dense(v, w).shape == (24,)
    torch.testing.assert_close(ops.dense(v, w), F.linear(v, w), atol=1e-5, rtol=1e-5)
    wide = torch.randn(5, 32, generator=g)[:, ::2]  # non-contiguous rows
    torch.testing.assert_close(ops.dense(wide, w), F.linear(wide, w), atol=1e-5, rtol=1e-5)
    one = torch.randn(1, 32, generator=g)[:, 16:]  # one row, offset view
    torch.testing.assert_close(ops.dense(one, w), F.linear(one, w), atol=1e-5, rtol=1e-5)


def test_gradients_flow() -> None:
    g = torch.Generator().manual_seed(2)
    w = torch.randn(8, 6, generator=g, requires_grad=True)
    x = torch.randn(1, 6, generator=g, requires_grad=True)
    ops.dense(x, w).sum().backward()
    assert x.grad is not None and w.grad is not None
    torch.testing.assert_close(w.grad, x.detach().expand(8, 6))
    torch.testing.assert_close(x.grad, w.detach().sum(0, keepdim=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_other_dtypes_are_f_linear(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(12, 8, generator=g).to(dtype)
    x = torch.randn(3, 8, generator=g).to(dtype)
    assert torch.equal(ops.dense(x, w), F.linear(x, w))


def test_linear_modules_use_it() -> None:
    lin, merged = Linear(8, 5, bias=True), MergedLinear(8, [3, 4], bias=False)
    x = torch.randn(1, 8)
    with torch.no_grad():
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(merged(x), F.linear(x, merged.weight), atol=1e-6, rtol=1e-6)

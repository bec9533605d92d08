"""``updraft.ops.interpreter``: under the Triton interpreter a kernel's helper calls no longer
re-patch ``triton.language`` each time, and the kernels compute what they did."""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl

from updraft.ops import interpreter

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter runs only (CPU)")


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _helper_loop_kernel(X, Out, N: tl.constexpr, ROUNDS: tl.constexpr):
    pid = tl.program_id(0)
    x = tl.load(X + pid * N + tl.arange(0, N))
    for _ in tl.static_range(ROUNDS):
        x = _twice(x)  # a helper from this module (triton.language)
    tl.store(Out + pid, tl.sum(x, axis=0))  # and one from triton.language.standard (core)


def test_installed_by_the_suite_and_idempotent() -> None:
    from triton.runtime import interpreter as ti

    assert getattr(ti, "_updraft_patched", False), "tests/conftest.py installs it under the interpreter"
    assert interpreter.install() is False  # a second install changes nothing


def test_helper_calls_patch_once_per_launch_and_compute_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.runtime import interpreter as ti

    calls = []
    real = ti._patch_lang

    def spy(fn):  # noqa: ANN001, ANN202
        calls.append(fn)
        return real(fn)

    monkeypatch.setattr(ti, "_patch_lang", spy)
    x = torch.arange(3 * 8, dtype=torch.float32).view(3, 8)
    out = torch.empty(3)
    _helper_loop_kernel[(3,)](x, out, N=8, ROUNDS=5)
    assert torch.equal(out, x.sum(1) * 32)
    # the launch's own patch, then at most one per other module set (tl.sum's); unpatched, every
    # one of the 3 x (5 + 1) helper calls patched again
    assert 1 <= len(calls) <= 2, len(calls)
    calls.clear()
    _helper_loop_kernel[(3,)](x, out, N=8, ROUNDS=5)  # a new launch patches again (its scope was restored)
    assert torch.equal(out, x.sum(1) * 32) and 1 <= len(calls) <= 2


def test_does_nothing_without_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert interpreter.install() is False


@triton.jit
def _dot_kernel(A, B, Out, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    rm, rk, rn = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(A + rm[:, None] * K + rk[None, :])
    b = tl.load(B + rk[:, None] * N + rn[None, :])
    tl.store(Out + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def test_dot_sums_every_output_the_same_way() -> None:
    """Identical columns of B give identical columns of A @ B, bit for bit, as an MMA gives
    them (numpy's BLAS, which the interpreter's ``tl.dot`` called, summed a tile's edge columns
    in another order on AMD EPYC, and a tie broke to a later index), and the products are the
    float32 sums of the float64 reference."""
    g = torch.Generator().manual_seed(0)
    m, k, n = 16, 64, 64
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, 1, generator=g).expand(k, n).contiguous()
    out = torch.empty(m, n)
    _dot_kernel[(1,)](a, b, out, M=m, K=k, N=n)
    assert all(torch.equal(out[:, j], out[:, 0]) for j in range(n)), (out - out[:, :1]).abs().max()
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)

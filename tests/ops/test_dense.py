"""``ops.dense``: both CPU float32 forms equal a float64 product to rounding at every row count and
layout, every other device or dtype takes ``F.linear`` itself, and the form per row count is the
one ``calibrate`` timed faster (or the one ``UPDRAFT_CPU_DENSE`` pins)."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from updraft import ops
from updraft.models.layers import Linear, MergedLinear
from updraft.ops import dense as _dense_fn  # noqa: F401  (the package attribute is the function)
from updraft.ops.dense import ROW_BUCKETS, DensePlan, calibrate, plan, use_plan

dense_mod = sys.modules["updraft.ops.dense"]


@pytest.fixture
def fresh_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that has not read the environment or calibrated yet."""
    monkeypatch.setattr(dense_mod, "_plan", None)
    monkeypatch.delenv("UPDRAFT_CPU_DENSE", raising=False)


def _ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    out = x.double() @ w.double().t()
    return out + b.double() if b is not None else out


@pytest.mark.parametrize("form", ["mm", "linear"])
@pytest.mark.parametrize("rows", [0, 1, 2, 3, 7, 33, 64, 65])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_a_float64_product(rows: int, bias: bool, form: str) -> None:
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(97, 40, generator=g)
    b = torch.randn(97, generator=g) if bias else None
    x = torch.randn(rows, 40, generator=g)
    with use_plan(form):
        out = ops.dense(x, w, b)
    assert out.shape == (rows, 97) and out.dtype == torch.float32 and out.is_contiguous()
    torch.testing.assert_close(out.double(), _ref(x, w, b), atol=1e-5, rtol=1e-5)


def test_large_batches_are_f_linear() -> None:
    """Past ``MAX_ROWS`` (prefill) MKL's own GEMM is faster: the same call, bit for bit."""
    from updraft.ops.dense import MAX_ROWS

    g = torch.Generator().manual_seed(4)
    w, x = torch.randn(30, 16, generator=g), torch.randn(MAX_ROWS + 1, 16, generator=g)
    assert torch.equal(ops.dense(x, w), F.linear(x, w))


@pytest.mark.parametrize("form", ["mm", "linear"])
def test_leading_dims_vectors_and_strided_inputs(form: str) -> None:
    with use_plan(form):
        _leading_dims_vectors_and_strided_inputs()


def _leading_dims_vectors_and_strided_inputs() -> None:
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


@pytest.mark.parametrize("form", ["mm", "linear"])
def test_gradients_flow(form: str) -> None:
    g = torch.Generator().manual_seed(2)
    w = torch.randn(8, 6, generator=g, requires_grad=True)
    x = torch.randn(1, 6, generator=g, requires_grad=True)
    with use_plan(form):
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


def test_the_mm_form_is_the_one_chosen() -> None:
    """Under ``mm`` a 3-row product is ``(W @ x.T).T`` (bit for bit), under ``linear`` ``F.linear``."""
    g = torch.Generator().manual_seed(5)
    w, x = torch.randn(64, 32, generator=g), torch.randn(3, 32, generator=g)
    with use_plan("mm"):
        assert torch.equal(ops.dense(x, w), torch.mm(w, x.t()).t())
    with use_plan("linear"):
        assert torch.equal(ops.dense(x, w), F.linear(x, w))


def test_a_row_count_follows_the_first_bucket_at_or_above_it() -> None:
    p = DensePlan(frozenset({1, 8}), "test")
    assert [p.uses_mm(m) for m in (1, 2, 5, 8, 9, 64)] == [True, False, True, True, False, False]
    assert ROW_BUCKETS[-1] == dense_mod.MAX_ROWS


def test_use_plan_restores_the_plan_before(fresh_plan: None) -> None:
    before = plan()
    with use_plan("linear") as pinned:
        assert plan() is pinned and not pinned.mm_buckets
    assert plan() is before
    with pytest.raises(ValueError, match="expected linear or mm"), use_plan("auto"):
        pass


@pytest.mark.parametrize(("value", "source", "mm_buckets"), [
    ("linear", "UPDRAFT_CPU_DENSE=linear", set()),
    ("MM", "UPDRAFT_CPU_DENSE=mm", set(ROW_BUCKETS)),
    ("", "default", set(ROW_BUCKETS)),  # empty: auto, the default until calibrated
])
def test_the_environment_pins_the_form(fresh_plan: None, monkeypatch: pytest.MonkeyPatch, value: str, source: str,
                                       mm_buckets: set[int]) -> None:
    monkeypatch.setenv("UPDRAFT_CPU_DENSE", value)
    assert plan().source == source and plan().mm_buckets == mm_buckets
    if value:  # a pinned choice is never measured
        assert calibrate([torch.zeros(8, 8)], min_bytes=0) is plan()


def test_a_bad_environment_value_is_one_clear_error(fresh_plan: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPDRAFT_CPU_DENSE", "fast")
    with pytest.raises(ValueError, match=r"UPDRAFT_CPU_DENSE='fast' is invalid: expected one of auto, linear, mm"):
        plan()


def test_calibrate_keeps_the_faster_form_per_bucket(fresh_plan: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mm`` where it beats ``F.linear`` by the margin (rows <= 4 here), ``F.linear`` elsewhere and on
    a near tie; once chosen, the process keeps it."""
    timed: list[tuple[int, bool]] = []

    def fake_pass(weights: list[torch.Tensor], xs: dict[int, torch.Tensor], use_mm: bool) -> float:
        m = next(iter(xs.values())).shape[0]
        timed.append((m, use_mm))
        if m <= 4:
            return 10.0 if use_mm else 20.0
        return 9.8 if (use_mm and m == 8) else (30.0 if use_mm else 10.0)  # 8: within the margin

    monkeypatch.setattr(dense_mod, "_pass_ms", fake_pass)
    weights = [torch.zeros(6, 4), torch.zeros(4, 6)]
    got = calibrate(weights, min_bytes=0)
    assert got.source == "calibrated" and got.mm_buckets == {1, 2, 4}
    assert got.ms[1] == (20.0, 10.0) and plan() is got
    assert sorted(timed) == sorted((m, f) for m in ROW_BUCKETS for f in (False, True))
    assert calibrate(weights, min_bytes=0) is got and len(timed) == 2 * len(ROW_BUCKETS)


def test_calibrate_leaves_weights_that_fit_a_cache_alone(fresh_plan: None) -> None:
    assert calibrate([torch.zeros(64, 64)]) is plan() and plan().source == "default"
    assert calibrate([torch.zeros(4, 4, 4), torch.zeros(4, 4, dtype=torch.float64)], min_bytes=0).source == "default"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cpu_float32_runner_calibrates(tiny_checkpoint, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    """The model runner hands its matrices to ``calibrate`` on CPU in float32, and only there."""
    from updraft.memory.pools import ReqToTokenPool
    from updraft.models.loader import load_checkpoint
    from updraft.runtime import model_runner

    seen: list[int] = []
    monkeypatch.setattr(model_runner, "calibrate_dense", lambda ws: seen.append(len(ws)))
    model = load_checkpoint(tiny_checkpoint("llama"), dtype=dtype, device="cpu", progress=False).model
    model_runner.ModelRunner(model, ReqToTokenPool(2, 16, "cpu"), 8, 1, "torch_native")
    assert seen == ([sum(1 for p in model.parameters() if p.dim() == 2)] if dtype == torch.float32 else [])

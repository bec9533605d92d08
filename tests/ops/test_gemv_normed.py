"""``gemv.linear_add_norm`` and the ``Prologue(normed=...)`` consumers under the interpreter.

The producer's epilogue adds its GEMM output to the residual stream, multiplies the sum by the
next norm's weight and leaves per-program sums of squares; the consumer (linear, QKV + RoPE +
KV store, gate/up + SiLU) scales its sums by ``rstd`` from them. Checked against float64 written
here: the stream bitwise (``round(round(y) + residual)``, as the unfused add rounds), ``scaled``
bitwise from the stream, the partial sums adding up to the stream's sum of squares, and the
consumer's output within the kernels' tolerances of ``rmsnorm(stream) @ W`` in float64; FMA and
dot tiles, odd N and K, M = 1..48, producer tiles that do not divide N.
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)
pytest.importorskip("triton")

from updraft.ops import gemv  # noqa: E402
from updraft.ops.gemv import NormedRows, Prologue  # noqa: E402
from updraft.ops.gemv_config import GemvConfig  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.bfloat16]
TILES = [("fma", 8), ("dot", 16)]


def cfg_of(kind: str, block: int, bk: int = 32) -> GemvConfig:
    return GemvConfig(block, bk, kind == "dot", num_warps=4, num_stages=2)


def randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


def produce(m: int, k_in: int, hidden: int, dtype: torch.dtype, tile: tuple[str, int], seed: int,
            ) -> tuple[NormedRows, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A producer launch: (normed rows, its x, weight, residual, next norm weight)."""
    x = randn(m, k_in, dtype=dtype, seed=seed)
    w = randn(hidden, k_in, dtype=dtype, seed=seed + 1, scale=0.3)
    res = randn(m, hidden, dtype=dtype, seed=seed + 2, scale=3.0)
    nw = (1 + randn(hidden, dtype=torch.float32, seed=seed + 3, scale=0.2)).to(dtype)
    return gemv.linear_add_norm(x, w, res, nw, 1e-5, config=cfg_of(*tile)), x, w, res, nw


def normed64(nr: NormedRows, nw: torch.Tensor) -> torch.Tensor:
    s = nr.stream.double()
    return s / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + nr.eps) * nw.double()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t[0]}{t[1]}")
@pytest.mark.parametrize("m", [1, 6, 16, 48])
def test_linear_add_norm(dtype: torch.dtype, tile: tuple[str, int], m: int) -> None:
    hidden, k_in = 45, 70  # neither a multiple of any tile
    nr, x, w, res, nw = produce(m, k_in, hidden, dtype, tile, seed=m)
    y = gemv.linear(x, w, config=cfg_of(*tile))[0]  # the same GEMM, rounded to the dtype
    assert torch.equal(nr.stream, (y.float() + res.float()).to(dtype)), "the stream rounds as round(y) + residual"
    assert rel_err(nr.stream, x.double() @ w.double().T + res.double()) <= TOL[dtype]
    assert torch.equal(nr.scaled, (nr.stream.float() * nw.float()).to(dtype))
    assert nr.sumsq.shape == (m, -(-hidden // tile[1])) and nr.sumsq.dtype == torch.float32
    want = nr.stream.double().pow(2).sum(-1)
    assert torch.allclose(nr.sumsq.double().sum(-1), want, rtol=1e-5), "partials add up to the row's sum of squares"
    assert nr.eps == 1e-5


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t[0]}{t[1]}")
@pytest.mark.parametrize("m", [1, 5, 48])
def test_linear_reads_normed_rows(dtype: torch.dtype, tile: tuple[str, int], m: int) -> None:
    hidden, n = 45, 37
    nr, *_, nw = produce(m, 24, hidden, dtype, ("fma", 4) if tile[0] == "dot" else ("dot", 16), seed=10 + m)
    w = randn(n, hidden, dtype=dtype, seed=30, scale=0.3)
    b = randn(n, dtype=dtype, seed=31)
    out, new_res, _ = gemv.linear(nr.scaled, w, b, Prologue(normed=nr), config=cfg_of(*tile))
    assert new_res is None
    assert rel_err(out, normed64(nr, nw) @ w.double().T + b.double()) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", [("fma", 4), ("dot", 8)], ids=lambda t: f"{t[0]}{t[1]}")
@pytest.mark.parametrize("m", [1, 6, 36])
def test_qkv_and_gate_up_read_normed_rows(dtype: torch.dtype, tile: tuple[str, int], m: int) -> None:
    hq, hkv, d, hidden, inter = 3, 1, 32, 52, 37
    nr, *_, nw = produce(m, 20, hidden, dtype, ("dot", 16), seed=40 + m)
    rows = normed64(nr, nw)
    # QKV: q, k rotated, k and v stored
    wq = randn((hq + 2 * hkv) * d, hidden, dtype=dtype, seed=41, scale=0.3)
    half = d // 2
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    f = torch.arange(64, dtype=torch.float32)[:, None] * inv[None, :]
    table = torch.cat([f.cos(), f.sin()], dim=-1).to(dtype)
    pos = torch.randint(0, 64, (m,), generator=torch.Generator().manual_seed(42))
    loc = torch.randperm(40, generator=torch.Generator().manual_seed(43))[:m]
    kp, vp = torch.zeros(40, hkv, d, dtype=dtype), torch.zeros(40, hkv, d, dtype=dtype)
    qkv, new_res = gemv.qkv_rope_store(nr.scaled, wq, None, Prologue(normed=nr), num_heads=hq, num_kv_heads=hkv,
                                       head_dim=d, k_pool=kp, v_pool=vp, loc=loc, positions=pos, cos_sin=table,
                                       config=cfg_of(*tile))
    assert new_res is None
    y = rows @ wq.double().T
    cs = table.double()[pos]
    k64 = y[:, hq * d : (hq + hkv) * d].reshape(m, hkv, d)
    k64 = torch.cat([k64[..., :half] * cs[:, None, :half] - k64[..., half:] * cs[:, None, half:],
                     k64[..., half:] * cs[:, None, :half] + k64[..., :half] * cs[:, None, half:]], -1)
    assert rel_err(kp[loc], k64) <= TOL[dtype] and rel_err(vp[loc], y[:, (hq + hkv) * d :].reshape(m, hkv, d)) <= TOL[dtype]
    assert torch.equal(kp[loc].reshape(m, -1), qkv[:, hq * d : (hq + hkv) * d])
    # gate/up + SiLU
    wg = randn(2 * inter, hidden, dtype=dtype, seed=44, scale=0.3)
    act, new_res = gemv.gate_up_silu(nr.scaled, wg, Prologue(normed=nr), config=cfg_of(*tile))
    assert new_res is None
    g = rows @ wg.double().T
    assert rel_err(act, g[:, :inter] / (1 + torch.exp(-g[:, :inter])) * g[:, inter:]) <= TOL[dtype] * 2


def test_normed_prologue_takes_nothing_else() -> None:
    """A normed prologue is the whole prologue: rows other than ``scaled``, or another norm, add
    or gather beside it, are not supported."""
    nr, *_ = produce(3, 8, 16, torch.float32, ("fma", 4), seed=60)
    w = randn(5, 16, dtype=torch.float32, seed=61)
    assert gemv.supported(nr.scaled, w, Prologue(normed=nr))
    assert not gemv.supported(nr.stream, w, Prologue(normed=nr))
    assert not gemv.supported(nr.scaled, w, Prologue(normed=nr, norm_weight=torch.ones(16)))
    assert not gemv.supported(nr.scaled, w, Prologue(normed=nr, residual=nr.stream))
    assert not gemv.supported(nr.scaled, w, Prologue(normed=nr, ids=torch.tensor([0, 1, 2])))

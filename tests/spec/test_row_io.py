"""``read_rows`` (the fused iteration's rows in and its forwards' inputs out, one launch) against
torch, on the GPU or the Triton interpreter: every field, every layout segment, mixed dtypes,
table rows out of order and repeated."""

from __future__ import annotations

import os

import pytest
import torch

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs CUDA or triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)",
                allow_module_level=True)

from updraft.spec import device_rng  # noqa: E402
from updraft.spec.row_io import IterLayout, UniformDraw, read_rows, use_triton  # noqa: E402


def test_the_kernel_runs_here() -> None:
    """Every test below checks the kernel, not the torch path ``read_rows`` falls back to."""
    assert use_triton(torch.empty(0, device=DEV))


def layout(bs: int, widths: tuple[int, ...], offsets: tuple[int, ...], table: torch.Tensor) -> IterLayout:
    first = [sum(bs * w for w in widths[:j]) for j in range(len(widths))]
    t = bs * sum(widths)
    dev = table.device
    return IterLayout(torch.full((t,), -1, dtype=torch.int64, device=dev), torch.full((t,), -1, dtype=torch.int64, device=dev),
                      torch.full((len(widths), bs), -1, dtype=torch.int32, device=dev), table, widths, offsets,
                      tuple(first), torch.tensor(list(zip(widths, offsets, first)), dtype=torch.int32, device=dev).reshape(-1, 3))


@pytest.mark.parametrize("widths,offsets", [((6,), (-1,)), ((1, 1, 1, 1, 6), (-1, 0, 1, 2, -1)), ((1, 3), (2, 0))])
def test_read_rows_lays_out_every_segment(widths: tuple[int, ...], offsets: tuple[int, ...]) -> None:
    """The layout ``read_rows`` writes in its launch (positions, KV slots, lengths of every
    segment: the chain's draft steps, the verify block) against the values by hand and against
    ``IterLayout.write_torch``: rows out of order and repeated (the padding row), the EAGLE
    chain's offsets."""
    gen = torch.Generator().manual_seed(len(widths))
    bs, width, num = 5, 40, 9
    table = torch.randperm(num * width, generator=gen).reshape(num, width).to(device=DEV, dtype=torch.int32)
    seq_len = torch.randint(3, width - 8, (num,), generator=gen).to(DEV)
    rows = torch.tensor([6, 0, 3, 7, 0], device=DEV)
    got, want = layout(bs, widths, offsets, table), layout(bs, widths, offsets, table)
    r = read_rows(rows, seq_len, torch.zeros(num, dtype=torch.long, device=DEV), layout=got)
    want.write_torch(rows, seq_len[rows])
    assert torch.equal(r.seq_len, seq_len[rows])
    for field in ("positions", "out_cache_loc", "seq_lens"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field
    n = seq_len[rows]
    for j, (w, off, t0) in enumerate(zip(widths, offsets, got.first_token)):
        pos = (n + off)[:, None] + torch.arange(w, device=DEV)
        assert torch.equal(got.positions[t0 : t0 + bs * w], pos.reshape(-1)), j
        assert torch.equal(got.out_cache_loc[t0 : t0 + bs * w], table[rows[:, None], pos].reshape(-1).long()), j
        assert torch.equal(got.seq_lens[j], (n + off + w).int()), j


@pytest.mark.parametrize("feat_dim,with_params", [(0, False), (24, True), (5000, False)])
def test_read_rows_matches_gathers(feat_dim: int, with_params: bool) -> None:
    """``read_rows`` against the torch gathers: every output, rows out of order and repeated (the
    padding row), a feature wider than one block (5000 > 4096), bf16 features."""
    gen = torch.Generator().manual_seed(feat_dim)
    num = 9
    seq_len = torch.randint(1, 1000, (num,), generator=gen).to(DEV)
    bonus = torch.randint(0, 50000, (num,), generator=gen).to(DEV)
    feat = torch.randn(num, feat_dim, generator=gen).to(DEV, torch.bfloat16) if feat_dim else None
    params = torch.rand(num, 7, generator=gen).to(DEV) if with_params else None
    rows = torch.tensor([4, 0, 8, 0, 2], device=DEV)
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
    rng = rng.to(DEV)
    rows = torch.tensor([4, 0, 8, 0, 2], device=DEV)
    zeros = torch.zeros(num, dtype=torch.long, device=DEV)
    for stream in (1000, 2**33 + 5):
        got = read_rows(rows, zeros, zeros,
                        draw=UniformDraw(rng[:, 0], rng[:, 1], stream, n))
        want = device_rng.uniform(rng[rows, 0], rng[rows, 1], stream, n)
        assert got.uniforms is not None and got.uniforms.dtype == torch.float32
        assert torch.equal(got.uniforms, want)


@pytest.mark.parametrize("dtype,feat_dim", [(torch.bfloat16, 576), (torch.float32, 24), (torch.bfloat16, 5000)])
def test_read_rows_normalises_the_features_as_the_norm_launch(dtype: torch.dtype, feat_dim: int) -> None:
    """With a ``RowNorm``, ``read_rows`` also returns the gathered features' RMSNorm: what
    ``ops.rmsnorm`` (the first draft's norm launch it replaces) gives for them up to the float32
    sum's order (the rstd within an ulp, so bf16 values equal or one rounding apart), and the
    features themselves unchanged; rows out of order and repeated (the padding row), a row wider
    than one tile (5000 > 4096: the gather, then ``ops.rmsnorm``)."""
    from updraft import ops
    from updraft.spec.row_io import RowNorm

    gen = torch.Generator().manual_seed(feat_dim)
    num = 9
    feat = (3 * torch.randn(num, feat_dim, generator=gen)).to(DEV, dtype)
    weight = (1 + torch.randn(feat_dim, generator=gen) / 4).to(DEV, dtype)
    rows = torch.tensor([4, 0, 8, 0, 2], device=DEV)
    zeros = torch.zeros(num, dtype=torch.long, device=DEV)
    got = read_rows(rows, zeros, zeros, feat, norm=RowNorm(weight, 1e-5))
    assert got.feat is not None and torch.equal(got.feat, feat[rows])
    with ops.use_backend("triton"):
        want = ops.rmsnorm(feat[rows], weight, 1e-5)
    assert got.normed is not None and got.normed.dtype == want.dtype
    if dtype == torch.float32:
        torch.testing.assert_close(got.normed, want, rtol=1e-6, atol=1e-6)
    else:  # equal but where the rstd's last bit tips a rounding: one bf16 ulp (2**-7 relative)
        same = got.normed == want
        assert same.float().mean() > 0.99
        assert ((got.normed.float() - want.float()).abs() <= want.float().abs() * 2**-7).all()
    # against float64 too: the norm launch's contract (one rounding to the dtype, then the weight's)
    ref = (feat[rows].double() * torch.rsqrt(feat[rows].double().pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype)
    assert torch.allclose(got.normed.double(), ref.double() * weight.double(), rtol=1e-2 if dtype != torch.float32 else 1e-5)
    assert read_rows(rows, zeros, zeros, feat).normed is None
    with pytest.raises(ValueError, match="RowNorm"):
        read_rows(rows, zeros, zeros, feat, norm=RowNorm(weight[:-1], 1e-5))

"""Small-M GEMMs whose token rows are split over programs (``GemvConfig.m_tile``), under the
interpreter.

A 48-row verify block (6 tokens x 8 requests) otherwise runs one program per column tile over all
its rows. With ``m_tile`` each column tile gets ``ceil(M / m_tile)`` programs (the grid's second
axis), each over its own rows: every epilogue must then index its rows from the tile's first one
(stores, pool slots, positions, the residual written by the column tile's program 0, the
producer's per-program sums of squares). Checked here against float64 written from scratch and
against the same launch without the split, FMA and dot tiles, M not a multiple of the tile.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)
pytest.importorskip("triton")

from updraft.ops import gemv, gemv_config  # noqa: E402
from updraft.ops.gemv import Prologue  # noqa: E402
from updraft.ops.gemv_config import GemvConfig, allowed, candidates, m_bucket  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
#: (dot, block_n, m_tile): tensor-core tiles of 16 rows, FMA tiles of 8
SPLITS = [(True, 16, 16), (False, 4, 8)]


def cfg(dot: bool, block: int, m_tile: int = 0, bk: int = 32) -> GemvConfig:
    return GemvConfig(block, bk, dot, num_warps=4, num_stages=2, m_tile=m_tile)


def randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


def add_norm_prologue(m: int, k: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, Prologue, torch.Tensor]:
    """x, the residual add + norm prologue (new residual written) and its float64 rows."""
    x = randn(m, k, dtype=dtype, seed=seed)
    res = randn(m, k, dtype=dtype, seed=seed + 1, scale=3.0)
    nw = (1 + randn(k, dtype=torch.float32, seed=seed + 2, scale=0.2)).to(dtype)
    rows = x.double() + res.double()
    rows = rows / torch.sqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-5) * nw.double()
    return x, Prologue(norm_weight=nw, eps=1e-5, residual=res, write_residual=True), rows


def test_config_rows_and_programs() -> None:
    assert cfg(True, 16, 16).block_m(64) == 16 and cfg(True, 16, 16).m_programs(48) == 3
    assert cfg(True, 16, 16).m_programs(33) == 3 and cfg(True, 16, 16).m_programs(16) == 1
    assert cfg(True, 16).block_m(64) == 64 and cfg(True, 16).m_programs(48) == 1
    assert cfg(True, 16, 32).block_m(16) == 16  # never more rows than the bucket
    assert cfg(False, 4, 8).block_m(64) == 8 and cfg(False, 4, 8).m_programs(48) == 6
    assert cfg(True, 8, 8).block_m(64) == 16  # a dot tile holds at least 16 rows
    assert not allowed("linear", cfg(True, 16, 24), 0) and allowed("linear", cfg(True, 16, 32), 0)
    for bucket in (1, 8, 16):
        assert all(c.m_tile == 0 for c in candidates("linear", 576, 576, bucket))
    split = {c.m_tile for c in candidates("gate_up", 1536, 576, 64) if c.dot}
    assert split == {0, 16, 32}
    assert {c.m_tile for c in candidates("qkv", 960, 576, 32, head_dim=64) if c.dot} == {0, 16}
    assert all(c.m_tile == 0 for c in candidates("linear", 576, 576, 64) if not c.dot)


def test_cache_entries_keep_the_split(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuned split is stored and read back; entries written before ``m_tile`` existed load
    as unsplit."""
    monkeypatch.setenv("UPDRAFT_CACHE", str(tmp_path))
    gemv_config._table.cache_clear()
    try:
        gemv_config.store("a", cfg(True, 16, 16))
        raw = json.loads(gemv_config.cache_path().read_text())
        raw["b"] = {"block_n": 8, "block_k": 128, "dot": True, "num_warps": 4, "num_stages": 3}
        gemv_config.cache_path().write_text(json.dumps(raw))
        got = gemv_config._read(gemv_config.cache_path())
        assert got["a"] == cfg(True, 16, 16) and got["b"].m_tile == 0
    finally:
        gemv_config._table.cache_clear()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("split", SPLITS, ids=lambda s: "dot" if s[0] else "fma")
@pytest.mark.parametrize("m", [33, 48])
def test_linear_split(dtype: torch.dtype, split: tuple[bool, int, int], m: int) -> None:
    n, k = 45, 70
    x, pro, rows = add_norm_prologue(m, k, dtype, seed=m)
    w = randn(n, k, dtype=dtype, seed=20, scale=0.3)
    b = randn(n, dtype=dtype, seed=21)
    out, new_res, _ = gemv.linear(x, w, b, pro, config=cfg(*split))
    assert rel_err(out, rows @ w.double().T + b.double()) <= TOL[dtype]
    assert new_res is not None and torch.equal(new_res, x + pro.residual), "every row tile writes its residual rows"
    whole, whole_res, _ = gemv.linear(x, w, b, pro, config=cfg(split[0], split[1]))
    assert torch.equal(new_res, whole_res)
    assert rel_err(out, whole.double()) <= TOL[dtype]


def test_linear_split_gathers_rows() -> None:
    """Rows ``ids`` of an embedding table, read at a stride (a column of an id block)."""
    m, k, n = 29, 40, 33
    table = randn(50, k, dtype=torch.float32, seed=1)
    block = torch.randint(0, 50, (m, 3), generator=torch.Generator().manual_seed(2))
    nw = 1 + randn(k, dtype=torch.float32, seed=3, scale=0.2)
    pro = Prologue(norm_weight=nw, eps=1e-5, ids=block[:, 1], write_residual=True)
    w = randn(n, k, dtype=torch.float32, seed=4, scale=0.3)
    out, new_res, _ = gemv.linear(table, w, None, pro, config=cfg(True, 16, 16))
    rows = table.double()[block[:, 1]]
    rows = rows / torch.sqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-5) * nw.double()
    assert rel_err(out, rows @ w.double().T) <= 1e-5
    assert new_res is not None and torch.equal(new_res, table[block[:, 1]])


def test_argmax_ignores_the_split() -> None:
    """The argmax's ticket counts one program per column tile: a split config is run unsplit."""
    m, k, n = 12, 32, 70
    x = randn(m, k, dtype=torch.float32, seed=5)
    w = randn(n, k, dtype=torch.float32, seed=6)
    logits, _, best = gemv.linear(x, w, argmax=True, config=cfg(False, 4, 4))
    assert best is not None and torch.equal(best, logits.argmax(-1))
    assert torch.equal(logits.argmax(-1), (x.double() @ w.double().T).argmax(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("split", SPLITS, ids=lambda s: "dot" if s[0] else "fma")
def test_add_norm_producer_and_consumers_split(dtype: torch.dtype, split: tuple[bool, int, int]) -> None:
    """``linear_add_norm`` split over rows (each row tile's partial sums of squares), read by a
    split gate/up and a split linear."""
    m, k_in, hidden, inter, n = 40, 24, 45, 37, 29
    x = randn(m, k_in, dtype=dtype, seed=7)
    w = randn(hidden, k_in, dtype=dtype, seed=8, scale=0.3)
    res = randn(m, hidden, dtype=dtype, seed=9, scale=3.0)
    nw = (1 + randn(hidden, dtype=torch.float32, seed=10, scale=0.2)).to(dtype)
    nr = gemv.linear_add_norm(x, w, res, nw, 1e-5, config=cfg(*split))
    whole = gemv.linear_add_norm(x, w, res, nw, 1e-5, config=cfg(split[0], split[1]))
    assert torch.equal(nr.stream, whole.stream) and torch.equal(nr.scaled, whole.scaled)
    assert torch.allclose(nr.sumsq.double().sum(-1), nr.stream.double().pow(2).sum(-1), rtol=1e-5)
    s = nr.stream.double()
    rows = s / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * nw.double()
    wg = randn(2 * inter, hidden, dtype=dtype, seed=11, scale=0.3)
    act, _ = gemv.gate_up_silu(nr.scaled, wg, Prologue(normed=nr), config=cfg(*split))
    g = rows @ wg.double().T
    assert rel_err(act, g[:, :inter] / (1 + torch.exp(-g[:, :inter])) * g[:, inter:]) <= TOL[dtype] * 2
    wl = randn(n, hidden, dtype=dtype, seed=12, scale=0.3)
    out, _, _ = gemv.linear(nr.scaled, wl, None, Prologue(normed=nr), config=cfg(*split))
    assert rel_err(out, rows @ wl.double().T) <= TOL[dtype]


def rope64(x: torch.Tensor, pos: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    row = table.double()[pos][:, None, :]
    cos, sin = row[..., :half], row[..., half:]
    return torch.cat([x[..., :half] * cos - x[..., half:] * sin, x[..., half:] * cos + x[..., :half] * sin], -1)


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: "dot" if s[0] else "fma")
@pytest.mark.parametrize("dual", [False, True], ids=["one_input", "eagle3"])
def test_qkv_rope_store_split(split: tuple[bool, int, int], dual: bool) -> None:
    """Each row tile rotates its rows at their positions and stores them in their slots; no other
    slot is written. ``dual``: EAGLE-3's two normalised inputs side by side."""
    dot, _, m_tile = split
    m, hq, hkv, d, k1, k2 = 37, 2, 1, 32, 40, 36
    dt = torch.float32
    half = d // 2
    table = randn(60, k1, dtype=dt, seed=13)
    ids = torch.randint(0, 60, (m,), generator=torch.Generator().manual_seed(14))
    nw = 1 + randn(k1, dtype=dt, seed=15, scale=0.2)
    feat, nw2 = randn(m, k2, dtype=dt, seed=16, scale=2.0), 1 + randn(k2, dtype=dt, seed=17, scale=0.2)
    pro = (Prologue(norm_weight=nw, eps=1e-5, ids=ids, x2=feat, norm_weight2=nw2) if dual
           else Prologue(norm_weight=nw, eps=1e-5, ids=ids, write_residual=True))
    w = randn((hq + 2 * hkv) * d, k1 + (k2 if dual else 0), dtype=dt, seed=18, scale=0.3)
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    f = torch.arange(64, dtype=torch.float32)[:, None] * inv[None, :]
    cs = torch.cat([f.cos(), f.sin()], dim=-1)
    pos = torch.randint(0, 64, (m,), generator=torch.Generator().manual_seed(19))
    loc = torch.randperm(80, generator=torch.Generator().manual_seed(20))[:m]
    kp, vp = torch.zeros(80, hkv, d), torch.zeros(80, hkv, d)
    qkv, new_res = gemv.qkv_rope_store(table, w, None, pro, num_heads=hq, num_kv_heads=hkv, head_dim=d, k_pool=kp,
                                       v_pool=vp, loc=loc, positions=pos, cos_sin=cs,
                                       config=cfg(dot, 4 if not dot else 8, m_tile))

    def normed(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-5) * weight.double()

    rows = normed(table[ids], nw)
    if dual:
        rows = torch.cat([rows, normed(feat, nw2)], -1)
    y = rows @ w.double().T
    q64 = rope64(y[:, : hq * d].reshape(m, hq, d), pos, cs)
    k64 = rope64(y[:, hq * d : (hq + hkv) * d].reshape(m, hkv, d), pos, cs)
    v64 = y[:, (hq + hkv) * d :].reshape(m, hkv, d)
    assert rel_err(qkv[:, : hq * d].reshape(m, hq, d), q64) <= 1e-5
    assert rel_err(kp[loc], k64) <= 1e-5 and rel_err(vp[loc], v64) <= 1e-5
    untouched = torch.ones(80, dtype=torch.bool)
    untouched[loc] = False
    assert not kp[untouched].any() and not vp[untouched].any()
    assert (new_res is None) == dual and (dual or torch.equal(new_res, table[ids]))
    assert m_bucket(m) == 64 and half == 16

"""The small-M GEMM kernels (``updraft.ops.gemv``) under the interpreter, against float64
computations written here from scratch: fp32 inputs within 1e-5 of float64, bf16 within 1e-2
(relative to the output's scale); bitwise where no sum is involved (the new residual stream, the
argmax of the logits the kernel wrote). FMA and tensor-core (dot) tiles, odd N and K (not
multiples of any tile), M = 1..64, with/without residual, norm, bias, embedding gather; the QKV
kernel's pool writes for page sizes 1 and 4 (other slots untouched).
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)
pytest.importorskip("triton")

from updraft.ops import gemv  # noqa: E402
from updraft.ops.gemv import Prologue  # noqa: E402
from updraft.ops.gemv_config import GemvConfig, allowed, candidates, heuristic, m_bucket  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.bfloat16]
FMA, DOT = "fma", "dot"


def cfg_of(kind: str, block: int, bk: int = 32) -> GemvConfig:
    return GemvConfig(block, bk, kind == DOT, num_warps=4, num_stages=2)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


def randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def prologue64(x: torch.Tensor, pro: Prologue) -> torch.Tensor:
    """The GEMM input rows in float64: gather, add, RMSNorm (no intermediate rounding)."""
    rows = x.double() if pro.ids is None else x.double()[pro.ids]
    if pro.residual is not None:
        rows = rows + (pro.residual.double() if pro.ids is None else pro.residual.double()[pro.ids])
    if pro.norm_weight is not None:
        rows = rows / torch.sqrt(rows.pow(2).mean(-1, keepdim=True) + pro.eps) * pro.norm_weight.double()
    return rows


def make_prologue(kind: str, m: int, k: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, Prologue]:
    """x and a prologue: "none", "norm", "add_norm" (residual add + norm, residual written),
    "embed" (rows gathered from a table, normed, the gathered rows written as the residual)."""
    nw = (1 + randn(k, dtype=torch.float32, seed=seed + 1, scale=0.2)).to(dtype)
    if kind == "embed":
        table = randn(50, k, dtype=dtype, seed=seed)
        ids = torch.randint(0, 50, (m,), generator=torch.Generator().manual_seed(seed + 2))
        return table, Prologue(norm_weight=nw, eps=1e-5, ids=ids, write_residual=True)
    x = randn(m, k, dtype=dtype, seed=seed)
    if kind == "none":
        return x, Prologue()
    if kind == "norm":
        return x, Prologue(norm_weight=nw, eps=1e-5)
    res = randn(m, k, dtype=dtype, seed=seed + 3, scale=3.0)
    return x, Prologue(norm_weight=nw, eps=1e-5, residual=res, write_residual=True)


def check_residual(x: torch.Tensor, pro: Prologue, new_res: torch.Tensor | None) -> None:
    if not pro.write_residual:
        assert new_res is None
        return
    assert new_res is not None
    rows = x if pro.ids is None else x[pro.ids]
    want = rows + pro.residual if pro.residual is not None else rows
    assert torch.equal(new_res, want), "the new residual must round exactly as x + residual"


# ---- linear ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", [(FMA, 8), (DOT, 16)], ids=lambda t: f"{t[0]}{t[1]}")
@pytest.mark.parametrize("m,prologue,bias", [(1, "none", True), (3, "norm", False), (5, "add_norm", True),
                                             (16, "add_norm", False), (7, "embed", False), (48, "add_norm", True),
                                             (29, "embed", False)])
def test_linear(dtype: torch.dtype, tile: tuple[str, int], m: int, prologue: str, bias: bool) -> None:
    n, k = 45, 70  # neither a multiple of any tile
    x, pro = make_prologue(prologue, m, k, dtype, seed=m)
    w = randn(n, k, dtype=dtype, seed=20, scale=0.3)
    b = randn(n, dtype=dtype, seed=21) if bias else None
    out, new_res, am = gemv.linear(x, w, b, pro, config=cfg_of(*tile))
    ref = prologue64(x, pro) @ w.double().T + (b.double() if b is not None else 0)
    assert out.shape == (m, n) and out.dtype == dtype and am is None
    assert rel_err(out, ref) <= TOL[dtype], rel_err(out, ref)
    check_residual(x, pro, new_res)


@pytest.mark.parametrize("tile", [(FMA, 4), (DOT, 16)], ids=lambda t: t[0])
def test_linear_every_m(tile: tuple[str, int]) -> None:
    """M = 1..16 and both edges of the 32- and 64-row buckets: each bucket's masking (rows past M
    read nothing and store nothing)."""
    k, n = 24, 19
    w = randn(n, k, dtype=torch.float32, seed=30)
    for m in [*range(1, 18), 31, 32, 33, 63, 64]:
        x = randn(m, k, dtype=torch.float32, seed=31 + m)
        cfg = cfg_of(*tile, bk=16)
        got, _, _ = gemv.linear(x, w, config=cfg)
        assert rel_err(got, x.double() @ w.double().T) <= 1e-5, m
        assert m_bucket(m) >= m and cfg.block_m(m_bucket(m)) >= m


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", [(FMA, 8), (DOT, 16)], ids=lambda t: t[0])
def test_lm_head_norm_and_argmax(dtype: torch.dtype, tile: tuple[str, int]) -> None:
    """Final norm (residual add, gathered rows) + LM head: fp32 logits rounded to the dtype first
    (``linear(...).float()``), and the argmax of exactly those logits, ties to the first index."""
    m_all, k, vocab = 9, 40, 301
    h = randn(m_all, k, dtype=dtype, seed=40)
    res = randn(m_all, k, dtype=dtype, seed=41)
    nw = (1 + randn(k, dtype=torch.float32, seed=42, scale=0.2)).to(dtype)
    w = randn(vocab, k, dtype=dtype, seed=43)
    w[200] = w[17]  # a tie across programs: the first column must win
    w[18] = w[17]  # a tie inside a program
    rows = torch.tensor([8, 0, 3])
    pro = Prologue(norm_weight=nw, eps=1e-6, residual=res, ids=rows)
    logits, new_res, am = gemv.linear(h, w, None, pro, out_dtype=torch.float32, argmax=True, config=cfg_of(*tile))
    assert new_res is None and logits.dtype == torch.float32 and am is not None
    assert torch.equal(logits, logits.to(dtype).float()), "logits are dtype values widened to fp32"
    ref = prologue64(h, pro) @ w.double().T
    assert rel_err(logits, ref) <= TOL[dtype]
    assert torch.equal(am, logits.argmax(-1))
    # force the tie to be the maximum: a row equal to w[17]'s direction
    w2 = torch.zeros(vocab, k, dtype=dtype)
    w2[[17, 18, 200]] = 1.0
    _, _, am2 = gemv.linear(h, w2, None, Prologue(ids=rows), argmax=True, config=cfg_of(*tile))
    pos = h[rows].double().sum(-1) > 0
    assert torch.equal(am2[pos], torch.full((int(pos.sum()),), 17))
    # a second launch reuses the ticket counter (reset by the last program)
    _, _, am3 = gemv.linear(h, w, None, pro, argmax=True, config=cfg_of(*tile))
    assert torch.equal(am3, am)
    assert int(gemv.semaphore(h.device).item()) == 0


def test_quantize_rows_fp8() -> None:
    """Each row's largest magnitude maps to 448 (exactly representable), every weight within
    2^-4 relative of its row's scale times its FP8 value, a zero row gets scale 1."""
    w = randn(37, 50, dtype=torch.float32, seed=60) * torch.logspace(-3, 2, 37)[:, None]
    w[5] = 0.0
    q, scale = gemv.quantize_rows_fp8(w)
    assert q.dtype == gemv.FP8 and scale.dtype == torch.float32 and q.shape == w.shape and scale.shape == (37,)
    assert scale[5] == 1.0 and bool((q[5].float() == 0).all())
    back = q.float() * scale[:, None]
    assert bool((back - w).abs().le(w.abs() * 2**-4 + scale[:, None] * 2**-9).all())
    rows = [i for i in range(37) if i != 5]
    assert torch.equal(q[rows].float().abs().amax(1), torch.full((36,), 448.0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", [(FMA, 8), (DOT, 16)], ids=lambda t: f"{t[0]}{t[1]}")
@pytest.mark.parametrize("m,prologue", [(1, "none"), (6, "add_norm"), (16, "norm")])
def test_linear_fp8_weight(dtype: torch.dtype, tile: tuple[str, int], m: int, prologue: str) -> None:
    """An FP8 weight with a float32 scale per row: ``(a @ q.T) * scale`` of the float64 product
    of the exact FP8 values, rounded to the dtype once (logits widened as ``.float()``); its
    argmax is that of the logits written."""
    n, k = 45, 70
    x, pro = make_prologue(prologue, m, k, dtype, seed=70 + m)
    q, scale = gemv.quantize_rows_fp8(randn(n, k, dtype=torch.float32, seed=71, scale=0.3))
    out, new_res, am = gemv.linear(x, q, None, pro, out_dtype=torch.float32, argmax=True, config=cfg_of(*tile),
                                   w_scale=scale)
    ref = (prologue64(x, pro) @ q.double().T) * scale.double()
    assert out.shape == (m, n) and torch.equal(out, out.to(dtype).float())
    assert rel_err(out, ref) <= TOL[dtype], rel_err(out, ref)
    assert am is not None and torch.equal(am, out.argmax(-1))
    check_residual(x, pro, new_res)
    # an FP8 weight needs its scale, and a scale needs an FP8 weight of as many rows
    assert not gemv.supported(x, q, pro) and not gemv.supported(x, q.float().to(dtype), pro, scale)
    assert not gemv.supported(x, q, pro, scale[:-1])


@pytest.mark.parametrize("tile", [(FMA, 4), (DOT, 16)], ids=lambda t: t[0])
@pytest.mark.parametrize("m", [1, 2, 6, 16])
def test_linear_exact_f32(tile: tuple[str, int], m: int) -> None:
    """``exact_f32`` (a router's logits): bf16 inputs, float32 sums never rounded to bf16. 1e-5 of
    float64 is 2^-9 tighter than a bf16 rounding, so a rounded output cannot pass."""
    n, k = 37, 200
    x = randn(m, k, dtype=torch.bfloat16, seed=50 + m)
    w = randn(n, k, dtype=torch.bfloat16, seed=51, scale=0.3)
    out, new_res, am = gemv.linear(x, w, exact_f32=True, config=cfg_of(*tile))
    assert out.dtype == torch.float32 and out.shape == (m, n) and new_res is None and am is None
    assert rel_err(out, x.double() @ w.double().T) <= 1e-5, rel_err(out, x.double() @ w.double().T)
    assert not torch.equal(out, out.bfloat16().float())


def test_float_linear_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ops.float_linear``: the kernel under the "triton" override up to the row limit (within
    fp32 rounding of the exact product), the cast product itself (bitwise) on "auto" CPU tensors
    and past the limit."""
    from updraft import ops

    launches: list[int] = []
    real = gemv.linear

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - a spy with gemv.linear's signature
        launches.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(gemv, "linear", counted)
    w = randn(24, 64, dtype=torch.bfloat16, seed=60)
    for m in (1, 2, ops.FLOAT_LINEAR_MAX_ROWS, ops.FLOAT_LINEAR_MAX_ROWS + 1):
        x = randn(m, 64, dtype=torch.bfloat16, seed=61 + m)
        want = ops.dense(x.float(), w.float())
        launches.clear()
        with ops.use_backend("auto"):
            assert torch.equal(ops.float_linear(x, w), want)
        assert not launches
        with ops.use_backend("triton"):
            got = ops.float_linear(x, w)
        assert len(launches) == (1 if m <= ops.FLOAT_LINEAR_MAX_ROWS else 0), m
        assert got.dtype == torch.float32 and got.shape == (m, 24)
        assert rel_err(got, x.double() @ w.double().T) <= 1e-5


def test_argmax_is_for_lm_head_rows_only() -> None:
    """The argmax epilogue's last program reduces [M, programs] at once: at most 16 rows."""
    w = torch.ones(33, 16)
    gemv.linear(torch.ones(16, 16), w, argmax=True, config=cfg_of(DOT, 16, 16))
    with pytest.raises(AssertionError, match="argmax over 17 rows"):
        gemv.linear(torch.ones(17, 16), w, argmax=True, config=cfg_of(DOT, 16, 16))


def test_argmax_nan_row_picks_the_nan() -> None:
    x = torch.ones(1, 16)
    w = torch.ones(33, 16)
    w[5, 0] = float("nan")
    out, _, am = gemv.linear(x, w, argmax=True, config=cfg_of(FMA, 8, 16))
    assert torch.isnan(out[0, 5]) and int(am[0]) == int(out.argmax(-1)[0]) == 5


# ---- QKV + RoPE + KV store --------------------------------------------------------------------
def rope_table(max_pos: int, dim: int, dtype: torch.dtype) -> torch.Tensor:
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    f = torch.arange(max_pos, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], dim=-1).to(dtype)


def rotary64(x: torch.Tensor, pos: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    row = table.double()[pos][:, None, :]
    cos, sin = row[..., :half], row[..., half:]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def slots_for(m: int, page: int, seed: int) -> torch.Tensor:
    """Distinct pool slots as a paged allocator hands them out: whole pages in shuffled order."""
    pages = torch.randperm(40 // page, generator=torch.Generator().manual_seed(seed))[: -(-m // page) + 1]
    slots = (pages[:, None] * page + torch.arange(page)[None, :]).flatten()
    return slots[page // 2 : page // 2 + m] if page > 1 else slots[:m]


def check_qkv_rows(qkv: torch.Tensor, y: torch.Tensor, pos: torch.Tensor, table: torch.Tensor, k_pool: torch.Tensor,
                   v_pool: torch.Tensor, loc: torch.Tensor, heads: tuple[int, int, int], dtype: torch.dtype,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's q, k, v and pool rows against the float64 projection ``y`` rotated here;
    returns its k and v rows."""
    hq, hkv, d = heads
    m = y.shape[0]
    q64 = rotary64(y[:, : hq * d].reshape(m, hq, d), pos, table)
    k64 = rotary64(y[:, hq * d : (hq + hkv) * d].reshape(m, hkv, d), pos, table)
    v64 = y[:, (hq + hkv) * d :].reshape(m, hkv, d)
    q, kk, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    for got, want in ((q, q64), (kk, k64), (v, v64), (k_pool[loc], k64), (v_pool[loc], v64)):
        assert rel_err(got.reshape(want.shape), want) <= TOL[dtype], rel_err(got.reshape(want.shape), want)
    return kk, v


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", [(FMA, 4), (DOT, 8), (DOT, 16)], ids=lambda t: f"{t[0]}{t[1]}")
@pytest.mark.parametrize("m,heads,prologue,bias,page", [
    (1, (4, 2, 32), "add_norm", False, 1),
    (6, (3, 1, 32), "embed", True, 4),
    (16, (2, 2, 64), "norm", True, 1),
    (36, (3, 1, 32), "add_norm", True, 4),
])
def test_qkv_rope_store(dtype: torch.dtype, tile: tuple[str, int], m: int, heads: tuple[int, int, int],
                        prologue: str, bias: bool, page: int) -> None:
    hq, hkv, d = heads
    k = 52
    n = (hq + 2 * hkv) * d
    x, pro = make_prologue(prologue, m, k, dtype, seed=50 + m)
    w = randn(n, k, dtype=dtype, seed=51, scale=0.3)
    b = randn(n, dtype=dtype, seed=52) if bias else None
    table = rope_table(64, d, dtype)
    pos = torch.randint(0, 64, (m,), generator=torch.Generator().manual_seed(53))
    loc = slots_for(m, page, seed=54)
    k_pool, v_pool = torch.zeros(40, hkv, d, dtype=dtype), torch.zeros(40, hkv, d, dtype=dtype)
    qkv, new_res = gemv.qkv_rope_store(x, w, b, pro, num_heads=hq, num_kv_heads=hkv, head_dim=d, k_pool=k_pool,
                                       v_pool=v_pool, loc=loc, positions=pos, cos_sin=table, config=cfg_of(*tile))
    y = prologue64(x, pro) @ w.double().T + (b.double() if b is not None else 0)
    kk, v = check_qkv_rows(qkv, y, pos, table, k_pool, v_pool, loc, heads, dtype)
    assert torch.equal(k_pool[loc], kk.reshape(m, hkv, d)) and torch.equal(v_pool[loc], v.reshape(m, hkv, d))
    untouched = torch.ones(40, dtype=torch.bool)
    untouched[loc] = False
    assert not k_pool[untouched].any() and not v_pool[untouched].any()
    check_residual(x, pro, new_res)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", [(FMA, 4), (DOT, 8)], ids=lambda t: f"{t[0]}{t[1]}")
@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("widths", [(40, 36), (36, 72)], ids=lambda w: f"k{w[0]}_{w[1]}")
def test_qkv_rope_store_two_normalised_inputs(dtype: torch.dtype, tile: tuple[str, int], m: int,
                                              widths: tuple[int, int]) -> None:
    """EAGLE-3's mid layer: the QKV input is ``concat(norm(embedding[ids]), norm2(feature))``,
    each half with its own sum of squares and weight (K1, K2 unequal, not multiples of the
    32-wide chunk: the FMA tile's one loop runs past the shorter input on masks, either way)."""
    hq, hkv, d = 2, 1, 32
    k1, k2 = widths
    table, pro1 = make_prologue("embed", m, k1, dtype, seed=90 + m)
    feat = randn(m, k2, dtype=dtype, seed=91, scale=2.0)
    nw2 = (1 + randn(k2, dtype=torch.float32, seed=92, scale=0.2)).to(dtype)
    pro = Prologue(norm_weight=pro1.norm_weight, eps=1e-5, ids=pro1.ids, x2=feat, norm_weight2=nw2)
    w = randn((hq + 2 * hkv) * d, k1 + k2, dtype=dtype, seed=93, scale=0.3)
    tab = rope_table(64, d, dtype)
    pos = torch.randint(0, 64, (m,), generator=torch.Generator().manual_seed(94))
    loc = slots_for(m, 1, seed=95)
    k_pool, v_pool = torch.zeros(40, hkv, d, dtype=dtype), torch.zeros(40, hkv, d, dtype=dtype)
    qkv, new_res = gemv.qkv_rope_store(table, w, None, pro, num_heads=hq, num_kv_heads=hkv, head_dim=d, k_pool=k_pool,
                                       v_pool=v_pool, loc=loc, positions=pos, cos_sin=tab, config=cfg_of(*tile))
    half2 = prologue64(feat, Prologue(norm_weight=nw2, eps=1e-5))
    y = torch.cat([prologue64(table, Prologue(norm_weight=pro.norm_weight, eps=1e-5, ids=pro.ids)), half2], -1) @ w.double().T
    check_qkv_rows(qkv, y, pos, tab, k_pool, v_pool, loc, (hq, hkv, d), dtype)
    assert new_res is None
    assert not gemv.supported(table, w, Prologue(norm_weight=pro.norm_weight, x2=feat, norm_weight2=nw2, residual=table))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", [(FMA, 4), (DOT, 8)], ids=lambda t: f"{t[0]}{t[1]}")
@pytest.mark.parametrize("m", [1, 6])
def test_qkv_rope_store_adds_the_feature_product(dtype: torch.dtype, tile: tuple[str, int], m: int) -> None:
    """EAGLE-3's mid layer split in two launches: ``feature_product`` (the feature's half, float32,
    computed apart) and a QKV of the embedding rows alone over the weight's first K1 columns (a
    strided view) adding it (``addend``): the same rows, rotated and stored, as the whole input
    row against float64; and the float32 product itself against float64."""
    hq, hkv, d, k1, k2 = 2, 1, 32, 40, 72
    table, pro1 = make_prologue("embed", m, k1, dtype, seed=130 + m)
    feat = randn(m, k2, dtype=dtype, seed=131, scale=2.0)
    nw2 = (1 + randn(k2, dtype=torch.float32, seed=132, scale=0.2)).to(dtype)
    w = randn((hq + 2 * hkv) * d, k1 + k2, dtype=dtype, seed=133, scale=0.3)
    part = gemv.feature_product(feat, w, nw2, 1e-5)
    half2 = prologue64(feat, Prologue(norm_weight=nw2, eps=1e-5)) @ w[:, k1:].double().T
    assert part.dtype == torch.float32 and part.shape == (m, w.shape[0])
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]
    assert ((part.double() - half2).abs().max() / half2.abs().max()).item() <= tol
    tab = rope_table(64, d, dtype)
    pos = torch.randint(0, 64, (m,), generator=torch.Generator().manual_seed(134))
    loc = slots_for(m, 1, seed=135)
    k_pool, v_pool = torch.zeros(40, hkv, d, dtype=dtype), torch.zeros(40, hkv, d, dtype=dtype)
    qkv, new_res = gemv.qkv_rope_store(table, w[:, :k1], None, pro1, num_heads=hq, num_kv_heads=hkv, head_dim=d,
                                       k_pool=k_pool, v_pool=v_pool, loc=loc, positions=pos, cos_sin=tab,
                                       config=cfg_of(*tile), addend=part)
    y = prologue64(table, Prologue(norm_weight=pro1.norm_weight, eps=1e-5, ids=pro1.ids)) @ w[:, :k1].double().T + half2
    check_qkv_rows(qkv, y, pos, tab, k_pool, v_pool, loc, (hq, hkv, d), dtype)
    check_residual(table, pro1, new_res)
    with pytest.raises(AssertionError, match="addend"):  # an addend of the wrong width
        gemv.qkv_rope_store(table, w[:, :k1], None, pro1, num_heads=hq, num_kv_heads=hkv, head_dim=d, k_pool=k_pool,
                            v_pool=v_pool, loc=loc, positions=pos, cos_sin=tab, addend=part[:, 1:])


@pytest.mark.parametrize("dual", [False, True], ids=["qkv", "eagle3"])
def test_qkv_rope_store_whole_row_in_one_chunk(dual: bool) -> None:
    """The one-row config the H200 table ships for SmolLM2's QKV and the EAGLE-3 head's: a
    1024-wide K chunk over 576-wide rows (448 masked columns; the head's two inputs in the same
    step of its one loop), bf16, against float64."""
    dtype, m, hq, hkv, d, k = torch.bfloat16, 1, 2, 1, 64, 576
    table, pro = make_prologue("embed", m, k, dtype, seed=120)
    inputs = [prologue64(table, pro)]
    if dual:
        feat = randn(m, k, dtype=dtype, seed=121, scale=3.0)
        nw2 = (1 + randn(k, dtype=torch.float32, seed=122, scale=0.2)).to(dtype)
        pro = Prologue(norm_weight=pro.norm_weight, eps=1e-5, ids=pro.ids, x2=feat, norm_weight2=nw2)
        inputs.append(prologue64(feat, Prologue(norm_weight=nw2, eps=1e-5)))
    w = randn((hq + 2 * hkv) * d, k * len(inputs), dtype=dtype, seed=123, scale=0.05)
    tab = rope_table(64, d, dtype)
    pos = torch.tensor([37])
    loc = slots_for(m, 1, seed=124)
    k_pool, v_pool = torch.zeros(40, hkv, d, dtype=dtype), torch.zeros(40, hkv, d, dtype=dtype)
    qkv, new_res = gemv.qkv_rope_store(table, w, None, pro, num_heads=hq, num_kv_heads=hkv, head_dim=d, k_pool=k_pool,
                                       v_pool=v_pool, loc=loc, positions=pos, cos_sin=tab, config=cfg_of(FMA, 4, 1024))
    check_qkv_rows(qkv, torch.cat(inputs, -1) @ w.double().T, pos, tab, k_pool, v_pool, loc, (hq, hkv, d), dtype)
    check_residual(table, pro, new_res)


def test_qkv_rope_matches_the_unfused_roundings() -> None:
    """bf16: given the same projection output, the epilogue rounds as ``ops.rotary_`` does (the
    projection is computed exactly here: integer-valued inputs, so no summation-order effect)."""
    from updraft.ops import reference

    m, hq, hkv, d, k = 3, 2, 1, 32, 16
    gen = torch.Generator().manual_seed(60)
    x = torch.randint(-3, 4, (m, k), generator=gen).to(torch.bfloat16)
    w = torch.randint(-3, 4, ((hq + 2 * hkv) * d, k), generator=gen).to(torch.bfloat16)
    table = rope_table(32, d, torch.bfloat16)
    pos = torch.tensor([5, 0, 31])
    kp, vp = torch.zeros(8, hkv, d, dtype=torch.bfloat16), torch.zeros(8, hkv, d, dtype=torch.bfloat16)
    qkv, _ = gemv.qkv_rope_store(x, w, None, Prologue(), num_heads=hq, num_kv_heads=hkv, head_dim=d, k_pool=kp,
                                 v_pool=vp, loc=torch.tensor([1, 2, 3]), positions=pos, cos_sin=table,
                                 config=cfg_of(DOT, 8))
    y = torch.nn.functional.linear(x, w)
    q, kk, _ = y.split([hq * d, hkv * d, hkv * d], dim=-1)
    q, kk = q.reshape(m, hq, d).clone(), kk.reshape(m, hkv, d).clone()
    reference.rotary_(q, kk, pos, table)
    assert torch.equal(qkv[:, : hq * d], q.reshape(m, -1)) and torch.equal(qkv[:, hq * d : (hq + hkv) * d], kk.reshape(m, -1))


# ---- gate/up + SiLU ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile", [(FMA, 4), (DOT, 8)], ids=lambda t: t[0])
@pytest.mark.parametrize("m,prologue", [(1, "add_norm"), (9, "norm"), (16, "none"), (40, "add_norm")])
def test_gate_up_silu(dtype: torch.dtype, tile: tuple[str, int], m: int, prologue: str) -> None:
    inter, k = 37, 44
    x, pro = make_prologue(prologue, m, k, dtype, seed=70 + m)
    w = randn(2 * inter, k, dtype=dtype, seed=71, scale=0.3)
    act, new_res = gemv.gate_up_silu(x, w, pro, config=cfg_of(*tile))
    y = prologue64(x, pro) @ w.double().T
    g, u = y[:, :inter], y[:, inter:]
    assert act.shape == (m, inter)
    assert rel_err(act, g / (1 + torch.exp(-g)) * u) <= TOL[dtype] * 2
    check_residual(x, pro, new_res)


# ---- configurations ---------------------------------------------------------------------------
def test_configs_are_legal_and_cover_shapes() -> None:
    """Heuristic and sweep configs are legal for their kind (dot tiles >= 16 weight rows, qkv
    pairs dividing D/2), and the heuristic fills >= 2 programs per SM where the shape allows."""
    shapes = [("qkv", 960, 576, 64), ("linear", 576, 576, 0), ("gate_up", 1536, 576, 0), ("linear", 576, 1536, 0),
              ("qkv", 6144, 4096, 128), ("linear", 4096, 4096, 0), ("gate_up", 14336, 4096, 0),
              ("linear", 4096, 14336, 0), ("linear", 128256, 4096, 0), ("qkv", 320, 64, 32)]
    for kind, n, k, d in shapes:
        for bucket in (1, 2, 4, 8, 16, 32, 64):
            cfg = heuristic(kind, n, k, bucket, 132, d)
            assert allowed(kind, cfg, d) and cfg.dot == (bucket >= 4), (kind, n, k, bucket, cfg)
            assert cfg.num_warps in (1, 2, 4, 8) and cfg.block_k & (cfg.block_k - 1) == 0
            assert all(allowed(kind, c, d) for c in candidates(kind, n, k, bucket, d))
    assert -(-4096 // heuristic("linear", 4096, 4096, 1, 132).block_n) >= 264
    # a 576-wide row (and EAGLE-3's two of them) tries one 1024 chunk on FMA tiles; dot tiles and
    # rows 512 divides do not
    for kind, n, k, d in (("qkv", 960, 576, 64), ("qkv", 960, 1152, 64), ("gate_up", 1536, 576, 0)):
        assert any(c.block_k == 1024 and not c.dot for c in candidates(kind, n, k, 1, d)), (kind, k)
        assert not any(c.block_k == 1024 and c.dot for c in candidates(kind, n, k, 8, d)), (kind, k)
    assert not any(c.block_k == 1024 for c in candidates("linear", 576, 1536, 1))
    # one token row: tensor-core tiles are swept over long (bandwidth-bound) rows only
    assert any(c.dot for c in candidates("linear", 4096, 14336, 1)) and any(c.dot for c in candidates("qkv", 6144, 4096, 1, 128))
    assert not any(c.dot for c in candidates("linear", 576, 1536, 1)) and not any(c.dot for c in candidates("qkv", 960, 576, 1, 64))


def test_every_shipped_entry_is_a_legal_launch() -> None:
    """Each entry of ``gemv_tuned.json``: a key ``GPU|kind|n=|k=|d=|m=|dtype`` of a GPU the table
    names a family for, a kind and M bucket the kernels take, a dtype they run, and a config that
    ``allowed`` accepts for its kind (a hand-merged sweep result cannot ship a tile the launcher
    would refuse; the 8B shape's one-row H200 entries are tensor-core tiles: rows padded to 16)."""
    from updraft.ops import gemv_config as gc

    families = gc._shipped_families()
    entries = gc._shipped()
    assert entries and set(families) >= {k.split("|")[0] for k in entries}
    for key, cfg in entries.items():
        gpu, kind, n, k, d, m, dt = key.split("|")
        assert kind in gc.KINDS and dt in ("bfloat16", "float16", "float32", "float8_e4m3fn"), key
        assert n.startswith("n=") and k.startswith("k=") and d.startswith("d=") and m.startswith("m="), key
        assert int(m[2:]) in gc.M_BUCKETS and int(n[2:]) > 0 and int(k[2:]) > 0, key
        assert gc.allowed(kind, cfg, int(d[2:])), key
        assert cfg.num_warps in (1, 2, 4, 8, 16) and cfg.block_k & (cfg.block_k - 1) == 0, key
        assert key == gc._key(gpu, kind, int(n[2:]), int(k[2:]), int(m[2:]), getattr(torch, dt), int(d[2:]))
    h200_8b = [c for key, c in entries.items() if key.startswith("NVIDIA H200|") and "|k=4096|" in key]
    assert h200_8b and all(c.dot for c in h200_8b)


def test_a_gpu_takes_the_tuned_entries_of_its_family(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU the shipped table does not name (an H200) takes the entries of one it does with the
    same architecture and SM count (the H100); its own entries (the user's cache) come first; a
    GPU of another family, or one CUDA cannot be asked about, gets the heuristic."""
    from updraft.ops import gemv_config as gc

    cuda, bf16 = torch.device("cuda"), torch.bfloat16
    shipped = gc._shipped()
    h100_key = next(k for k in shipped if k.startswith("NVIDIA H100 80GB HBM3|linear|n=576|k=576|") and "|m=4|" in k)
    _, kind, n, k, d, m, _dt = h100_key.split("|")
    args = (kind, int(n[2:]), int(k[2:]), int(m[2:]), bf16, cuda, int(d[2:]))
    assert gc._shipped_families()["NVIDIA H100 80GB HBM3"] == "sm90x132"
    monkeypatch.setenv("UPDRAFT_CACHE", str(tmp_path))
    gc._table.cache_clear()
    monkeypatch.setattr(gc, "_device_name", lambda device: "NVIDIA H200")
    monkeypatch.setattr(gc, "family", lambda device: "sm90x132")
    try:
        gc.is_tuned.cache_clear()
        assert gc.lookup(*args) == shipped[h100_key] and gc.is_tuned(*args[:4], bf16, cuda, args[6])
        own = GemvConfig(8, 64, False, 4, 3)
        assert own != shipped[h100_key]
        gc.store(gc.key(*args[:4], bf16, cuda, args[6]), own)  # tuned on this GPU: its own entry wins
        assert gc.key(*args[:4], bf16, cuda, args[6]).startswith("NVIDIA H200|") and gc.lookup(*args) == own
        head_qkv = ("qkv", 960, 1152, 1, bf16, cuda, 64)  # shipped for both: the H200's own entry wins
        h100_cfg = shipped[gc._key("NVIDIA H100 80GB HBM3", *head_qkv[:4], bf16, 64)]
        assert gc.lookup(*head_qkv) == shipped[gc._key("NVIDIA H200", *head_qkv[:4], bf16, 64)] != h100_cfg
        monkeypatch.setattr(gc, "family", lambda device: "sm80x108")
        monkeypatch.setattr(gc, "_device_name", lambda device: "NVIDIA A100-SXM4-80GB")
        gc.is_tuned.cache_clear()
        assert gc._tuned(*args[:4], bf16, cuda, args[6]) is None and not gc.is_tuned(*args[:4], bf16, cuda, args[6])
    finally:
        gc._table.cache_clear()
        gc.is_tuned.cache_clear()
    monkeypatch.undo()
    gc.family.cache_clear()
    assert gc.family(torch.device("cpu")) == "cpu"
    if not torch.cuda.is_available():
        assert gc.family(cuda) == "", "no CUDA to ask: no family"

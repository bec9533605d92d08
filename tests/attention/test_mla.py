"""The ``mla`` backend under the Triton CPU interpreter, against the float64 MLA reference.

As ``test_triton.py``: TRITON_INTERPRET is set at the very top on a CPU-only machine (it must
precede any kernel definition) and the module skips itself where kernels would be compiled; the
GPU tests are ``test_mla_gpu.py``. Interpreter limit: bf16 dot operands are upcast (``DOT_F32``),
so bf16 loads, casts and stores are tested here, the bf16 tensor-core dot only on the GPU.

Also here (no kernels): the MLA reference against the plain one, and absorbed attention over the
latent cache against DeepSeek's unabsorbed multi-head form (the interface the model relies on).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch  # does not import triton

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("CUDA is present: these are the CPU-interpreter tests; the GPU tests are test_mla_gpu.py",
                allow_module_level=True)

from updraft.attention import create_backend  # noqa: E402
from updraft.attention.base import Rope  # noqa: E402
from updraft.attention.mla_backend import MLABackend  # noqa: E402
from updraft.attention.reference import reference_attention, reference_mla_attention  # noqa: E402
from updraft.attention.triton_kernels import TileConfig  # noqa: E402
from updraft.attention.triton_kernels import mla_decode as mla_decode_kernels  # noqa: E402
from updraft.batch import REAL_MODES, ForwardBatch, ForwardMode  # noqa: E402
from updraft.kit import harness  # noqa: E402
from updraft.kit.cases import LAYOUTS, AttnCase, sweep  # noqa: E402
from updraft.memory.pools import KVPool  # noqa: E402

if type(mla_decode_kernels._mla_decode_kernel).__name__ != "InterpretedFunction":
    pytest.skip("triton kernels were defined before TRITON_INTERPRET was set; run this file on its own",
                allow_module_level=True)

M = ForwardMode
MODES = list(REAL_MODES)


def mla_case(mode: ForwardMode, prefix: tuple[int, ...], ext: tuple[int, ...], *, heads: int = 8, rank: int = 32,
             rope: int = 16, page: int = 4, dtype: str = "float32", layout: str = "shuffled", **kw: object) -> AttnCase:
    return AttnCase(mode, heads, 1, rank + rope, page, prefix, ext, dtype, layout, v_head_dim=rank, shared_kv=True,
                    **kw)  # type: ignore[arg-type]


def run_case(case: AttnCase, *, splits: int | None = None, tile: TileConfig | None = None, save_kv: bool = True,
             early_metadata: bool = True) -> tuple[harness.CaseResult, MLABackend, ForwardBatch, torch.Tensor]:
    setup = harness.build_case(case)
    backend = MLABackend(setup.kv_pool, setup.req_to_token, case.num_heads, 1, case.head_dim)
    backend.kv_splits_override = splits
    backend.decode_early_metadata = early_metadata  # type: ignore[misc]
    if tile is not None:
        backend._tile = lambda use_decode, max_ext, bsz: tile  # type: ignore[method-assign]
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    before = setup.kv_pool.k_buffer[0].clone()
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch, save_kv=save_kv)
    if save_kv:
        return harness.check_output(setup, batch, out, backend.scale), backend, batch, out
    assert torch.equal(setup.kv_pool.k_buffer[0], before), "save_kv=False wrote the pool"
    ref = harness.reference_output(setup, backend.scale)
    err = harness.relative_error(out, ref)
    return harness.CaseResult(case, err, True, bool(torch.isnan(out).any()), harness.TOLERANCE[case.dtype]), backend, batch, out


# ---- the kit sweep at page sizes 1, 4 and 16 -------------------------------------------------
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_page_size_4(mode: ForwardMode) -> None:
    """CI's share (the quick kit matrix runs pages 1 and 16): the mode's mixed batch around the
    page boundary at page size 4, fp32 and bf16, two slot layouts."""
    prefix, ext = ((5, 3, 0, 40), (1, 1, 1, 1)) if mode.is_decode() else (
        ((5, 1, 33), (6, 6, 6)) if mode.is_fixed_stride(include_v2=True) else ((3, 4, 5, 16), (3, 1, 5, 2)))
    for dtype, layout in (("float32", "nonmonotonic"), ("bfloat16", "interleaved")):
        result, *_ = run_case(mla_case(mode, prefix, ext, dtype=dtype, layout=layout))
        assert result.ok, result.describe()


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_kit_sweep(mode: ForwardMode) -> None:
    """Every layout x {fp32, bf16} with the page size rotating over 1, 4 and 16 (every length
    set of the mode, tree masks for TARGET_VERIFY): each against the float64 MLA reference."""
    cases: list[AttnCase] = []
    for i, layout in enumerate(LAYOUTS):
        for j, dtype in enumerate(("float32", "bfloat16")):
            cases += sweep([mode], dtypes=(dtype,), page_sizes=((1, 4, 16)[(2 * i + j) % 3],), layouts=(layout,),
                           head_layouts=("mla",))
    assert len(cases) >= 32 and {c.page_size for c in cases} == {1, 4, 16}
    failures = [r.describe() for r in (harness.run_eager("mla", c) for c in cases) if not r.ok]
    assert not failures, f"{len(failures)}/{len(cases)} failed; first: {failures[:3]}"


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_many_active_splits(mode: ForwardMode) -> None:
    """Long prefixes and a forced, non-power-of-two split count: several splits hold keys,
    trailing ones are empty; the merge weighs them by LSE (also in the verify block's causal
    frontier, which a split can end before)."""
    ext = (1, 1) if mode.is_decode() else ((5, 5) if mode.is_fixed_stride(include_v2=True) else (9, 2))
    case = mla_case(mode, (77, 20), ext, page=16)
    for splits in (3, 7):
        result, _, batch, _ = run_case(case, splits=splits)
        assert batch.attn_metadata.plan.num_kv_splits == splits
        assert result.ok, result.describe()


@pytest.mark.parametrize("mode", [M.DECODE, M.TARGET_VERIFY, M.EXTEND, M.DRAFT_EXTEND_V2], ids=lambda m: m.name)
def test_real_widths(mode: ForwardMode) -> None:
    """DeepSeek-V2-Lite's widths (16 heads, 512 + 64) in bf16, with and without splits."""
    ext = (1, 1) if mode.is_decode() else ((4, 4) if mode.is_fixed_stride(include_v2=True) else (6, 3))
    case = mla_case(mode, (40, 3), ext, heads=16, rank=512, rope=64, page=4, dtype="bfloat16", layout="interleaved")
    for splits in (1, 2):
        result, *_ = run_case(case, splits=splits)
        assert result.ok, result.describe()


@pytest.mark.parametrize("mode", [M.DECODE, M.TARGET_VERIFY, M.EXTEND])
def test_gpu_tile_config(mode: ForwardMode) -> None:
    """The GPU's blocks (32 rows x 32 keys; 64-row extend tiles), run by the interpreter."""
    ext = (1, 1) if mode.is_decode() else ((4, 4) if mode.is_fixed_stride(include_v2=True) else (7, 2))
    rows = 32 if mode != M.EXTEND else 64
    tile = TileConfig(block_rows=rows, block_n=32, min_split=64, num_warps=8, num_stages=2)
    for splits in (1, 2):
        result, *_ = run_case(mla_case(mode, (130, 0), ext, heads=12, page=1), splits=splits, tile=tile)
        assert result.ok, result.describe()


@pytest.mark.parametrize("mode", [M.DECODE, M.DRAFT_DECODE, M.TARGET_VERIFY], ids=lambda m: m.name)
def test_slots_prefetched_a_block_ahead(mode: ForwardMode) -> None:
    """The pipelined decode tile (3 stages: the slots of the next block loaded in this one):
    splits ending inside a block and past the table row's last used entry, page sizes 1 and 16,
    over 1, 3 and 5 splits, equal the reference and the tile without prefetch."""
    ext = (1, 1, 1) if mode.is_decode() else (4, 4, 4)
    for page in (1, 16):
        case = mla_case(mode, (70, 33, 5), ext, page=page)
        outs = []
        for stages in (3, 2):  # 3: PREFETCH on (mla_decode_attention), 2: off
            tile = TileConfig(block_rows=16, block_n=16, min_split=16, num_warps=4, num_stages=stages)
            for splits in (1, 3, 5):
                result, _, batch, out = run_case(case, splits=splits, tile=tile)
                assert result.ok, (stages, splits, result.describe())
                outs.append(out)
        for a, b in zip(outs[:3], outs[3:]):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", [M.DECODE, M.DRAFT_DECODE, M.TARGET_VERIFY], ids=lambda m: m.name)
def test_early_metadata_form_equals_the_plain_form(monkeypatch: pytest.MonkeyPatch, mode: ForwardMode) -> None:
    """The decode kernel with its lengths and pool rows read before the PDL wait (on the GPU; the
    interpreter runs the same loads in the same order, without PDL): short and long contexts, one
    to five splits, a tree over the verify block, with and without the slots loaded a block ahead,
    bit for bit the plain form's output."""
    import updraft.attention.mla_backend as mb

    monkeypatch.setattr(mb, "pdl_enabled", lambda *a: True)  # the interpreter launches without PDL
    ext = (1, 1, 1, 1) if mode.is_decode() else (4, 4, 4, 4)
    for page, stages in ((1, 3), (16, 1)):
        case = mla_case(mode, (70, 33, 5, 150), ext, page=page, tree=mode == M.TARGET_VERIFY, layout="interleaved")
        tile = TileConfig(block_rows=16, block_n=16, min_split=16, num_warps=4, num_stages=stages)
        for splits in (1, 3, 5):
            outs = []
            for early in (False, True):
                result, _, _, out = run_case(case, splits=splits, tile=tile, early_metadata=early)
                assert result.ok, (stages, splits, early, result.describe())
                outs.append(out)
            assert torch.equal(outs[0], outs[1]), (page, stages, splits)


def test_early_metadata_is_taken_with_pdl_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``decode_early_metadata`` reaches the launcher only where the launch takes PDL (without
    the wait there is nothing to read before)."""
    import updraft.attention.mla_backend as mb

    seen: list[bool] = []
    real = mb.mla_decode_attention
    monkeypatch.setattr(mb, "mla_decode_attention", lambda *a, **k: (seen.append(k["early_metadata"]), real(*a, **k))[1])
    case = mla_case(M.DECODE, (20, 3), (1, 1))
    for pdl in (False, True):
        monkeypatch.setattr(mb, "pdl_enabled", lambda *a, on=pdl: on)
        run_case(case)
    run_case(case, early_metadata=False)
    assert seen == [False, True, False]


# ---- routing ----------------------------------------------------------------------------------
def test_extend_modes_never_reach_decode_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failure class 5: DRAFT_EXTEND_V2, DRAFT_EXTEND and EXTEND take the extend kernel; the
    decode-like modes take the decode kernel (TARGET_VERIFY too, unlike triton)."""
    import updraft.attention.mla_backend as mb

    calls: list[str] = []
    real = mb.mla_decode_attention

    def spy(*args: object, **kwargs: object) -> None:
        calls.append("decode")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mb, "mla_decode_attention", spy)
    for mode, ext in ((M.DRAFT_EXTEND_V2, (4, 4)), (M.DRAFT_EXTEND, (3, 1)), (M.EXTEND, (5, 2))):
        result, *_ = run_case(mla_case(mode, (20, 3), ext))
        assert result.ok, result.describe()
    assert not calls
    for mode, ext in ((M.DECODE, (1, 1)), (M.DRAFT_DECODE, (1, 1)), (M.TARGET_VERIFY, (4, 4))):
        result, *_ = run_case(mla_case(mode, (20, 3), ext))
        assert result.ok, result.describe()
    assert calls == ["decode"] * 3


@pytest.mark.parametrize("mode,ext", [(M.DECODE, 1), (M.TARGET_VERIFY, 4), (M.DRAFT_EXTEND_V2, 4)])
def test_save_kv_false_leaves_pool_alone(mode: ForwardMode, ext: int) -> None:
    """Without the store the new rows are not in the pool: every mode takes the extend kernel."""
    result, *_ = run_case(mla_case(mode, (20, 3), (ext, ext)), splits=2, save_kv=False)
    assert result.ok, result.describe()


def test_tree_masks_in_both_kernels() -> None:
    """A random tree over the verify block: the decode kernel (stored) and the extend kernel
    (save_kv=False); DRAFT_DECODE with topk > 1 rows under a tree as well."""
    case = mla_case(M.TARGET_VERIFY, (17, 0, 40), (5, 5, 5), layout="interleaved", tree=True)
    for save_kv in (True, False):
        result, *_ = run_case(case, splits=2, save_kv=save_kv)
        assert result.ok, result.describe()
    result, *_ = run_case(mla_case(M.DRAFT_DECODE, (9, 30), (3, 3), tree=True))
    assert result.ok, result.describe()


# ---- graph contract ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode,ext", [(M.DECODE, 1), (M.TARGET_VERIFY, 4), (M.DRAFT_EXTEND_V2, 4)])
def test_padded_graph_rows(monkeypatch: pytest.MonkeyPatch, mode: ForwardMode, ext: int) -> None:
    """Padded rows as the graph runner writes them (seq_lens = 1, row 0, extend = stride, the
    scratch slot): the prefix clamped to 0 in the kernels, outputs finite, real rows right, and the only slot
    written besides the real rows' is the scratch slot 0 (failure class 4)."""
    monkeypatch.setattr(ForwardBatch, "check_conventions", lambda self: None)
    case = mla_case(mode, (19, 6), (ext, ext), page=1)
    setup = harness.build_case(case)
    batch, q, k, _ = harness.pad_like_graph(harness.make_batch(setup), 3, setup.q, setup.k_new, setup.v_new)
    backend = MLABackend(setup.kv_pool, setup.req_to_token, case.num_heads, 1, case.head_dim)
    backend.kv_splits_override = 2
    before = setup.kv_pool.k_buffer[0].clone()
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    md = batch.attn_metadata
    # padded rows: seq_lens - ext < 0 where ext > 1, so the kernels' clamp of the prefix is exercised
    assert (md.seq_lens - md.ext_lens).tolist() == [19, 6] + [1 - ext] * 3
    out = backend.forward(q, k, k[..., : case.dv], 0, batch)
    real = setup.q.shape[0]
    assert torch.isfinite(out).all()
    assert harness.relative_error(out[:real], harness.reference_output(setup, backend.scale)) < 1e-4
    changed = (setup.kv_pool.k_buffer[0] != before).flatten(1).any(1).nonzero().flatten().tolist()
    assert set(changed) <= set(batch.out_cache_loc[:real].tolist()) | {0} and 0 in changed


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("mode,ext", [(M.DECODE, 1), (M.TARGET_VERIFY, 4), (M.DRAFT_EXTEND_V2, 4)])
def test_unseeded_zero_metadata_gives_zeros(monkeypatch: pytest.MonkeyPatch, mode: ForwardMode, ext: int,
                                            splits: int) -> None:
    """Failure class 8: all-zero metadata (a capture without seeded lengths) gives exact zeros,
    with every torch.empty poisoned so that no unwritten buffer passes by luck."""
    real_empty = torch.empty

    def poisoned_empty(*args: object, **kwargs: object) -> torch.Tensor:
        t = real_empty(*args, **kwargs)  # type: ignore[call-overload]
        return t.fill_(3.0) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", poisoned_empty)
    case = mla_case(mode, (19, 6), (ext, ext), page=1, layout="contiguous")
    setup = harness.build_case(case)
    backend = MLABackend(setup.kv_pool, setup.req_to_token, case.num_heads, 1, case.head_dim)
    backend.kv_splits_override = splits
    batch = harness.make_batch(setup)
    backend.init_forward_metadata(batch)
    md = batch.attn_metadata
    for t in (md.seq_lens, md.ext_lens, md.ext_start, md.req_pool_indices):
        t.zero_()
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    assert torch.equal(out, torch.zeros_like(out))


def test_fixed_stride_host_scalars_ignore_lengths() -> None:
    """Failure class 6: a verify plan depends on bs and stride only (metadata built for one step
    is refilled for another and stays right); a prefill refill needing a bigger grid is refused."""
    a, b = mla_case(M.TARGET_VERIFY, (3, 40), (4, 4), page=16), mla_case(M.TARGET_VERIFY, (60, 0), (4, 4), page=16, seed=3)
    setup_a, setup_b = harness.build_case(a), harness.build_case(b)
    backend_a = MLABackend(setup_a.kv_pool, setup_a.req_to_token, 8, 1, 48)
    batch_a = harness.make_batch(setup_a)
    backend_a.init_forward_metadata(batch_a)
    md = batch_a.attn_metadata
    backend_b = MLABackend(setup_b.kv_pool, setup_b.req_to_token, 8, 1, 48)
    batch_b = harness.make_batch(setup_b)
    assert backend_b._plan(batch_b) == md.plan
    backend_b._fill_metadata(batch_b, md)
    batch_b.attn_metadata = md
    out = backend_b.forward(setup_b.q, setup_b.k_new, setup_b.v_new, 0, batch_b)
    assert harness.check_output(setup_b, batch_b, out, backend_b.scale).ok
    e1 = harness.make_batch(harness.build_case(mla_case(M.EXTEND, (3,), (5,))))
    e2 = harness.make_batch(harness.build_case(mla_case(M.EXTEND, (3,), (40,))))
    backend_a.init_forward_metadata(e1)
    with pytest.raises(AssertionError, match="host scalars"):
        backend_a._fill_metadata(e2, e1.attn_metadata)


def test_forward_does_not_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    case = mla_case(M.TARGET_VERIFY, (30, 2), (4, 4), page=16)
    setup = harness.build_case(case)
    backend = MLABackend(setup.kv_pool, setup.req_to_token, 8, 1, 48)
    batch = harness.make_batch(setup)
    backend.init_forward_metadata(batch)

    def boom(self: torch.Tensor, *args: object) -> None:
        raise AssertionError("host sync in forward")

    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "item", boom)
        m.setattr(torch.Tensor, "tolist", boom)
        m.setattr(torch.Tensor, "__bool__", boom)
        out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    assert harness.check_output(setup, batch, out, backend.scale).ok


@pytest.mark.parametrize("heads,bs,stride,rows,splits,context", [
    (16, 8, 1, 16, 16, 32768), (16, 64, 1, 16, 2, 32768), (128, 8, 1, 32, 4, 32768), (128, 64, 1, 32, 1, 32768),
    (16, 8, 4, 32, 8, 32768), (16, 1, 2, 16, 16, 1024), (16, 8, 2, 16, 8, 1024), (16, 9, 2, 32, 8, 1024),
    (128, 1, 2, 32, 16, 1024), (16, 1, 1, 16, 16, 1024)])
def test_gpu_launch_plan(heads: int, bs: int, stride: int, rows: int, splits: int, context: int) -> None:
    """The plan an H100 (132 SMs) gets at 512 + 64, computed on the host: head blocks of 16 or
    32 rows (verify: 4 tokens x 16 heads in two), 64-key tiles in 3 stages (double-buffered,
    one program per SM), so KV splits aim at one wave, rounded down to a power of two, at most
    32 (the H100 sweep of 2026-11-26: 16 at decode bs 8, 8 at a 4-token verify bs 8), and a
    split at least ``max(64, f x rows)`` keys, f = 4 in decode and 2 in verify blocks: decode
    and a 2-token verify at 1k context run 16 splits of one tile (2 of 512 keys when f was 16:
    +1.2 ms a DeepSeek-V2-Lite MTP cycle on the H100; 8 of 128 keys: +85 us). A verify batch of
    at most 16 tokens tiles one token's 16 heads a program and splits as decode (f = 4); 18
    tokens pack two tokens a tile again; 128 heads fill 32-row tiles either way."""
    from updraft.batch import make_forward_batch

    pool = KVPool(1, 4, 16, 1, 576, torch.bfloat16, "cpu", v_head_dim=512, shared_kv=True)
    table = torch.zeros(bs + 1, context + 8, dtype=torch.int32)
    backend = MLABackend(pool, table, heads, 1, 576)
    backend.interpret, backend.num_sms = False, 132
    mode = M.DECODE if stride == 1 else M.TARGET_VERIFY
    batch = make_forward_batch(mode, torch.zeros(bs * stride, dtype=torch.long), torch.arange(1, bs + 1),
                               torch.full((bs,), context, dtype=torch.int32), torch.full((bs,), stride, dtype=torch.int32),
                               table, logits="none", stride=stride)
    plan = backend._plan(batch)
    assert plan.use_decode_kernel and plan.tile.block_rows == rows and plan.num_kv_splits == splits
    token_tiles = rows == heads and stride > 1
    floor = (MLABackend.min_split_rows if stride == 1 or token_tiles else MLABackend.verify_min_split_rows) * rows
    assert plan.tile.min_split == max(plan.tile.block_n, floor)
    assert plan.tile.num_warps == (4 if rows == 16 else 8)
    assert plan.tile.num_stages == 3 and plan.tile.block_n == 64


# ---- input checks -----------------------------------------------------------------------------
def test_bad_layouts_and_inputs_are_refused() -> None:
    table = torch.zeros(3, 16, dtype=torch.int32)
    plain = KVPool(1, 4, 4, 1, 48, torch.float32, "cpu")
    with pytest.raises(ValueError, match="shared_kv=False"):
        MLABackend(plain, table, 8, 1, 48)
    two = KVPool(1, 4, 4, 2, 48, torch.float32, "cpu", v_head_dim=32, shared_kv=True)
    with pytest.raises(ValueError, match="kv_heads=2"):
        create_backend("mla", two, table, 8, 2, 48)
    no_rope = KVPool(1, 4, 4, 1, 32, torch.float32, "cpu", v_head_dim=32, shared_kv=True)
    with pytest.raises(ValueError, match="v_head_dim .kv_lora_rank.=32"):
        MLABackend(no_rope, table, 8, 1, 32)
    case = mla_case(M.DECODE, (5,), (1,))
    setup = harness.build_case(case)
    backend = MLABackend(setup.kv_pool, setup.req_to_token, 8, 1, 48)
    batch = harness.make_batch(setup)
    backend.init_forward_metadata(batch)
    rope = Rope(torch.zeros(1, dtype=torch.long), torch.zeros(8, 48))
    with pytest.raises(ValueError, match="rope must be None"):
        backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch, rope=rope)
    with pytest.raises(ValueError, match=r"q \[T, 8, 48\]"):
        backend.forward(setup.q[..., :40], setup.k_new, setup.v_new, 0, batch)


# ---- the references and the absorbed form (no kernels) ----------------------------------------
def test_mla_reference_equals_plain_reference_on_the_latent_layout() -> None:
    gen = torch.Generator().manual_seed(3)
    latent = torch.randn(11, 48, generator=gen)
    q = torch.randn(4, 6, 48, generator=gen)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    for m in (None, mask):
        mla = reference_mla_attention(q, latent, 32, 0.2, m)
        plain = reference_attention(q, latent[:, None], latent[:, None, :32], 0.2, m)
        assert torch.allclose(mla, plain, atol=1e-12)


def test_absorbed_latent_attention_equals_deepseek_multi_head_form() -> None:
    """What the model relies on: with ``q_nope . W_UK`` as the query's latent part and ``W_UV``
    applied to the output, attention over the latent rows equals DeepSeek's per-head attention
    with K = [c W_UK^T | k_rope] and V = c W_UV^T (scale of the unabsorbed width)."""
    gen = torch.Generator().manual_seed(0)
    heads, rank, rope, nope, vdim, length, n = 4, 32, 16, 24, 20, 13, 3
    c = torch.randn(length, rank, generator=gen, dtype=torch.float64)
    k_rope = torch.randn(length, rope, generator=gen, dtype=torch.float64)
    w_uk = torch.randn(heads, nope, rank, generator=gen, dtype=torch.float64) / rank**0.5
    w_uv = torch.randn(heads, vdim, rank, generator=gen, dtype=torch.float64) / rank**0.5
    q_nope = torch.randn(n, heads, nope, generator=gen, dtype=torch.float64)
    q_rope = torch.randn(n, heads, rope, generator=gen, dtype=torch.float64)
    scale = (nope + rope) ** -0.5
    k_heads = torch.cat([torch.einsum("hdr,lr->lhd", w_uk, c), k_rope[:, None].expand(length, heads, rope)], dim=-1)
    v_heads = torch.einsum("hvr,lr->lhv", w_uv, c)
    mha = reference_attention(torch.cat([q_nope, q_rope], dim=-1), k_heads, v_heads, scale)
    q_latent = torch.cat([torch.einsum("nhd,hdr->nhr", q_nope, w_uk), q_rope], dim=-1)
    out_latent = reference_mla_attention(q_latent, torch.cat([c, k_rope], dim=-1), rank, scale)
    assert torch.allclose(torch.einsum("nhr,hvr->nhv", out_latent, w_uv), mha, atol=1e-10)


def test_bench_script_smoke(tmp_path: Path, load_benchmark: Callable[[str], Any]) -> None:
    """benchmarks/mla_bench.py parses its arguments and runs end to end on tiny shapes
    (interpreter: plumbing and correctness only; its timings mean nothing here)."""
    bench = load_benchmark("mla_bench")
    assert bench.parse_args(["--sweep", "--repeats", "5"]).sweep
    assert {v.label for v in bench.sweep_variants(16, 1)} >= {"rows=16,keys=64,warps=4,stages=2",
                                                             "rows=16,keys=32,splits=32,warps=8,stages=3"}
    out = tmp_path / "mla.json"
    assert bench.main(["--smoke", "--warmup", "0", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["decode"]) == 2 and len(data["verify"]) == 1
    assert all(r["rel_err_req0"] < 2e-2 and r["cache_gb"] > 0 for r in data["decode"] + data["verify"])
    # --table-width: the engine's req_to_token width (it caps the split count), not the context's
    assert bench.parse_args(["--table-width", "300"]).table_width == 300
    st = bench.LatentSetup(2, 40, 4, 32, 16, 1, torch.device("cpu"), torch.Generator().manual_seed(0), table_width=300)
    assert st.table.shape == (3, 300) and bool((st.table[1:, 40:] == 0).all())



def test_timeline_probe_smoke(tmp_path: Path, load_benchmark: Callable[[str], Any]) -> None:
    """benchmarks/mla_timeline_probe.py on tiny shapes (interpreter: zero stamps): its copies of the
    decode kernel's body (stamped, unstamped, slots two blocks ahead) give the production kernel's
    output exactly, so the timeline it reports on the GPU is that kernel's."""
    probe = load_benchmark("mla_timeline_probe")
    out = tmp_path / "timeline.json"
    assert probe.main(["--smoke", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    checked = [r for r in rows if "max_err_vs_production" in r]
    assert len(checked) == 3 and all(r["max_err_vs_production"] == 0.0 for r in checked)
    assert all(r["programs"] == 3 * 2 for r in checked)  # 1 head block x bs 2 x 3 splits

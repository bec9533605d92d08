"""The triton decode kernel's KV splits and their merge, under the interpreter: the kernel
merging its splits in the same launch (only the splits that hold keys take part; a lone one
writes the output; counters back at 0 afterwards) against the float64 reference and the
two-launch merge, the split floor (``decode_min_split``), programs past the context skipping
their body (``skip_empty_splits``), and ``forward_stored`` (K/V already in the pool) equal to
``forward`` with its own store.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)
pytest.importorskip("triton")

from updraft.attention.base import Rope  # noqa: E402
from updraft.attention.triton_backend import TritonBackend  # noqa: E402
from updraft.attention.triton_kernels import TileConfig  # noqa: E402
from updraft.attention.triton_kernels import decode as decode_kernels  # noqa: E402
from updraft.batch import ForwardMode  # noqa: E402
from updraft.kit import harness  # noqa: E402
from updraft.kit.cases import AttnCase  # noqa: E402


def backend_for(setup: harness.CaseSetup, case: AttnCase, splits: int, merge_in_kernel: bool) -> TritonBackend:
    be = TritonBackend(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
    be.kv_splits_override = splits
    be.merge_in_kernel = merge_in_kernel
    return be


def split_span(seq: int, splits: int, tile: TileConfig) -> int:
    """Keys a KV split covers for a request of ``seq`` keys (``slots.split_len``'s arithmetic)."""
    return max(math.ceil(math.ceil(seq / splits) / tile.block_n) * tile.block_n, tile.min_split)


@pytest.mark.parametrize("dtype,heads", [("float32", (8, 2)), ("bfloat16", (6, 1))])
def test_decode_merges_splits_in_one_launch(monkeypatch: pytest.MonkeyPatch, dtype: str, heads: tuple[int, int]) -> None:
    merges = []
    monkeypatch.setattr(decode_kernels, "merge_splits", lambda *a: merges.append(a))
    # long next to empty-ish prefixes: several live splits, trailing splits empty
    case = AttnCase(ForwardMode.DECODE, heads[0], heads[1], 32, 16, (77, 3, 40), (1, 1, 1), dtype, "shuffled")
    outs = []
    for splits in (3, 7):
        setup = harness.build_case(case)
        be = backend_for(setup, case, splits, merge_in_kernel=True)
        batch = harness.make_batch(setup)
        batch.attn_backend = be
        be.init_forward_metadata(batch)
        md = batch.attn_metadata
        assert md.plan.num_kv_splits == splits and md.sem is not None
        out = be.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
        result = harness.check_output(setup, batch, out, be.scale)
        assert result.ok, result.describe()
        assert not md.sem.any(), "every ticket counter must be back at 0"
        out2 = be.forward(setup.q, setup.k_new, setup.v_new, 0, batch)  # a second layer reuses them
        assert torch.equal(out, out2)
        outs.append(out)
    assert not merges, "the merge kernel must not run when the decode kernel merges"


@pytest.mark.parametrize("mode,ext", [(ForwardMode.DECODE, 1), (ForwardMode.TARGET_VERIFY, 4)])
def test_in_kernel_merge_touches_live_splits_only(monkeypatch: pytest.MonkeyPatch, mode: ForwardMode,
                                                   ext: int) -> None:
    """With the in-launch merge only the splits that hold keys take part: a request whose keys
    fit one split gets its output from that split directly (none of its partial rows written),
    one with several writes exactly its live splits' partials, and no program past the context
    stores anything. Output against the float64 reference; every counter back at 0."""
    monkeypatch.setattr(decode_kernels, "merge_splits", lambda *a: pytest.fail("merge launch"))
    case = AttnCase(mode, 4, 2, 32, 16, (70, 3, 21), (ext,) * 3, "float32", "shuffled")
    setup = harness.build_case(case)
    be = backend_for(setup, case, 7, merge_in_kernel=True)
    batch = harness.make_batch(setup)
    batch.attn_backend = be
    be.init_forward_metadata(batch)
    md = batch.attn_metadata
    md.mid_o.fill_(float("nan"))
    md.mid_lse.fill_(float("nan"))
    out = be.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    result = harness.check_output(setup, batch, out, be.scale)
    assert result.ok, result.describe()
    assert not md.sem.any(), "every ticket counter must be back at 0"
    lone = 0
    for b, seq in enumerate(batch.seq_lens.tolist()):
        span = split_span(seq, 7, md.plan.tile)
        live = math.ceil(seq / span)
        rows = slice(b * ext, (b + 1) * ext)
        for s in range(7):
            written = not md.mid_lse[rows, :, s].isnan().any().item()
            assert written == (live > 1 and s < live), (b, seq, s, live)
        lone += live == 1
    assert lone >= 1, "the case must hold a request whose keys fit one split"


@pytest.mark.parametrize("in_kernel", [False, True])
def test_decode_min_split_gives_short_contexts_few_live_splits(monkeypatch: pytest.MonkeyPatch,
                                                               in_kernel: bool) -> None:
    """``decode_min_split`` floors the decode kernel's split length (whole key blocks): the
    tile's ``min_split`` is the floor rounded up to a block, the split count is capped by what
    the table width can fill at that length, and the output is the reference's with both merges;
    extend tiles keep theirs."""
    monkeypatch.setattr(TritonBackend, "decode_min_split", 40)
    merges: list[int] = []
    real_merge = decode_kernels.merge_splits
    monkeypatch.setattr(decode_kernels, "merge_splits", lambda *a, **k: (merges.append(1), real_merge(*a, **k)))
    for mode, ext in ((ForwardMode.DECODE, 1), (ForwardMode.TARGET_VERIFY, 3)):
        case = AttnCase(mode, 8, 2, 32, 16, (100, 30, 2), (ext,) * 3, "float32", "shuffled")
        setup = harness.build_case(case)
        be = TritonBackend(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
        be.merge_in_kernel = in_kernel
        be.num_sms = 64  # the occupancy policy would want many splits: the width caps them
        batch = harness.make_batch(setup)
        batch.attn_backend = be
        be.init_forward_metadata(batch)
        plan = batch.attn_metadata.plan
        assert plan.tile.min_split == 48
        assert plan.num_kv_splits == min(-(-setup.req_to_token.shape[1] // 48), be.max_kv_splits) > 1
        merges.clear()
        out = be.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
        result = harness.check_output(setup, batch, out, be.scale)
        assert result.ok, result.describe()
        assert len(merges) == (0 if in_kernel else 1)
    ext_case = AttnCase(ForwardMode.EXTEND, 8, 2, 32, 16, (20,), (9,), "float32", "shuffled")
    setup = harness.build_case(ext_case)
    be = TritonBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32)
    assert be._tile(False, 9, 1).min_split == 16


@pytest.mark.parametrize("splits,prefix", [(5, (90, 33)), (24, (400, 33))])
def test_in_kernel_merge_equals_merge_kernel(splits: int, prefix: tuple[int, int]) -> None:
    """Up to and past the merge's splits per load (16 at these rows: 400 keys give 24 live)."""
    case = AttnCase(ForwardMode.DECODE, 8, 2, 32, 16, prefix, (1, 1), "float32", "shuffled")
    got = []
    for in_kernel in (True, False):
        setup = harness.build_case(case)
        be = backend_for(setup, case, splits, merge_in_kernel=in_kernel)
        batch = harness.make_batch(setup)
        batch.attn_backend = be
        be.init_forward_metadata(batch)
        assert (batch.attn_metadata.sem is not None) == in_kernel
        got.append(be.forward(setup.q, setup.k_new, setup.v_new, 0, batch))
    assert (got[0] - got[1]).abs().max().item() <= 1e-6


@pytest.mark.parametrize("mode,ext", [(ForwardMode.DECODE, (1, 1)), (ForwardMode.TARGET_VERIFY, (4, 4)),
                                      (ForwardMode.EXTEND, (5, 3))])
def test_forward_stored_equals_forward_with_store(mode: ForwardMode, ext: tuple[int, int]) -> None:
    """The fused QKV kernel rotates k and stores k, v itself; attention over that pool must be
    what ``forward(..., rope=...)`` computes after its own rotary + store."""
    case = AttnCase(mode, 4, 2, 32, 16, (20, 9), ext, "float32", "shuffled")
    setup = harness.build_case(case)
    be = backend_for(setup, case, 3, merge_in_kernel=True)
    batch = harness.make_batch(setup)
    batch.attn_backend = be
    be.init_forward_metadata(batch)
    table = torch.randn(64, 32, generator=torch.Generator().manual_seed(3))
    rope = Rope(batch.positions, table)
    q, k, v = setup.q.clone(), setup.k_new.clone(), setup.v_new.clone()
    pool_k, pool_v = be.kv_pool.k_buffer[0].clone(), be.kv_pool.v_buffer[0].clone()
    want = be.forward(q, k, v, 0, batch, rope=rope)  # rotates q, k in place and stores
    stored_k, stored_v = be.kv_pool.k_buffer[0].clone(), be.kv_pool.v_buffer[0].clone()
    be.kv_pool.k_buffer[0].copy_(pool_k)
    be.kv_pool.v_buffer[0].copy_(pool_v)
    be.kv_pool.store(0, batch.out_cache_loc, k, v)  # what the fused kernel writes: rotated k, v
    assert torch.equal(be.kv_pool.k_buffer[0], stored_k) and torch.equal(be.kv_pool.v_buffer[0], stored_v)
    got = be.forward_stored(q, k, v, 0, batch)
    assert torch.allclose(got, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("mode,ext", [(ForwardMode.DECODE, 1), (ForwardMode.TARGET_VERIFY, 4)])
def test_splits_past_the_context_skip_their_body(
    monkeypatch: pytest.MonkeyPatch, skip: bool, mode: ForwardMode, ext: int
) -> None:
    """With ``skip_empty_splits`` a decode-kernel program whose split holds none of its request's
    keys stores only its rows' lse (-inf): its partial rows keep what was there (NaN here; the
    merge weighs them 0 and never reads them); without, it stores zeros. Every live split's rows
    are written, and the output is the reference's either way."""
    monkeypatch.setattr(TritonBackend, "skip_empty_splits", skip)
    case = AttnCase(mode, 4, 2, 32, 16, (60, 3, 17), (ext,) * 3, "float32", "shuffled")
    setup = harness.build_case(case)
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 4, 2, 32)
    backend.kv_splits_override = 7
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    md = batch.attn_metadata
    md.mid_o.fill_(float("nan"))
    md.mid_lse.fill_(0.0)  # a stale finite lse, as an earlier step's live split leaves
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    result = harness.check_output(setup, batch, out, backend.scale)
    assert result.ok, result.describe()
    tile = md.plan.tile
    empty_seen = 0
    for b, seq in enumerate(batch.seq_lens.tolist()):
        span = split_span(seq, 7, tile)
        rows = md.mid_o[b * ext:(b + 1) * ext]
        for s in range(7):
            part = rows[:, :, s]
            if s * span >= seq:
                empty_seen += 1
                assert bool(part.isnan().all()) if skip else bool((part == 0).all()), (b, s)
                assert bool((md.mid_lse[b * ext:(b + 1) * ext, :, s] == float("-inf")).all()), (b, s)
            else:
                assert bool(part.isfinite().all()), (b, s)
    assert empty_seen >= 6


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("mode,ext,splits,folds", [
    (ForwardMode.TARGET_VERIFY, 4, 7, True),    # 12 rows, 7 splits: in the window
    (ForwardMode.DECODE, 1, 7, False),          # 3 rows: below it
    (ForwardMode.TARGET_VERIFY, 4, 1, False),   # one split: the kernel writes the output itself
    (ForwardMode.TARGET_VERIFY, 4, 17, False),  # past fold_merge_splits
    (ForwardMode.TARGET_VERIFY, 4, 3, False),   # below it
])
def test_stored_split_hands_over_the_partials(monkeypatch: pytest.MonkeyPatch, skip: bool, mode: ForwardMode,
                                              ext: int, splits: int, folds: bool) -> None:
    """``forward_stored_split`` in the backend's window launches the decode kernel alone and
    returns its partials, which merge (``merge_splits``) to ``forward_stored``'s output bit for bit
    (dead splits' partials unread with ``skip_empty_splits``); outside it, None and no launch."""
    monkeypatch.setattr(TritonBackend, "skip_empty_splits", skip)
    monkeypatch.setattr(TritonBackend, "fold_merge_rows", (12, 64))
    monkeypatch.setattr(TritonBackend, "fold_merge_splits", (4, 16))
    case = AttnCase(mode, 4, 2, 32, 16, (60, 3, 17), (ext,) * 3, "float32", "shuffled")
    setup = harness.build_case(case)
    be = backend_for(setup, case, splits, merge_in_kernel=False)
    batch = harness.make_batch(setup)
    batch.attn_backend = be
    be.init_forward_metadata(batch)
    be.forward(setup.q, setup.k_new, setup.v_new, 0, batch)  # stores the new rows
    want = be.forward_stored(setup.q, setup.k_new, setup.v_new, 0, batch)
    md = batch.attn_metadata
    md.mid_o.fill_(float("nan"))
    launches = []
    real = decode_kernels._decode_kernel
    monkeypatch.setattr(decode_kernels, "merge_splits", lambda *a, **k: pytest.fail("merge launch"))
    monkeypatch.setattr(decode_kernels, "_decode_kernel", type("K", (), {
        "__getitem__": lambda self, grid: (launches.append(grid), real[grid])[1]})())
    parts = be.forward_stored_split(setup.q, setup.k_new, setup.v_new, 0, batch)
    if not folds:
        assert parts is None and not launches
        return
    assert parts is not None and len(launches) == 1
    assert parts.mid_o is md.mid_o and parts.mid_lse is md.mid_lse
    monkeypatch.undo()
    got = torch.empty_like(want)
    decode_kernels.merge_splits(parts.mid_o, parts.mid_lse, got)
    assert torch.equal(got, want)


def test_merge_grid_of_any_heads_a_program_merges_the_same() -> None:
    """``merge_splits(heads_per_program=)`` (a probe's sweep of the merge grid) changes only how heads
    are shared among programs: every choice gives the default's output bit for bit, a dead split
    (lse -inf) weighs nothing, and a count that is not a power of two is refused by name."""
    from updraft.attention.triton_kernels.merge import merge_splits

    gen = torch.Generator().manual_seed(5)
    mid_o = torch.randn(6, 9, 5, 32, generator=gen)
    lse = torch.randn(6, 9, 5, generator=gen) * 3
    lse[:, :, 3:] = float("-inf")
    mid_o[:, :, 3:] = 0.0
    base = torch.empty(6, 9, 32)
    merge_splits(mid_o, lse, base, written=True)
    w = torch.softmax(lse.double() * math.log(2.0), -1)
    ref = (w[..., None] * mid_o.double()).sum(2)
    assert torch.allclose(base.double(), ref, atol=1e-6)
    for hm in (1, 2, 4, 16):
        out = torch.empty_like(base)
        merge_splits(mid_o, lse, out, written=True, heads_per_program=hm)
        assert torch.equal(out, base), hm
    with pytest.raises(ValueError, match="heads_per_program must be a power of two"):
        merge_splits(mid_o, lse, torch.empty_like(base), heads_per_program=3)
    out = torch.empty_like(base)
    merge_splits(mid_o, lse, out, written=True, max_programs=4)
    assert torch.equal(out, base)


def test_merge_grid_cap_takes_more_heads_a_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge_tiles(max_programs=)`` on the GPU's tile rule: SmolLM2's 48-row verify over 11 splits
    (48 x 3 programs of 4 heads) fits 132 programs at 8 heads a program; a cap no grid can meet stops
    at all heads in one program or at ``MAX_CAPPED_TILE`` partials; a cap already met, or none, leaves the rule's tile."""
    from updraft.attention.triton_kernels import merge

    monkeypatch.setattr(merge, "interpreting", lambda: False)
    assert merge.merge_tiles(48, 9, 11, 64) == (4, 16, 64)
    assert merge.merge_tiles(48, 9, 11, 64, max_programs=132) == (8, 16, 64)
    assert merge.merge_tiles(48, 9, 11, 64, max_programs=40) == (16, 16, 64)
    assert merge.merge_tiles(8, 9, 22, 64, max_programs=132) == merge.merge_tiles(8, 9, 22, 64)
    assert merge.merge_tiles(48, 9, 11, 64, heads_per_program=2, max_programs=132) == (2, 16, 64)
    # 32 split slots: the tile stops at MAX_CAPPED_TILE partials (8 heads), the grid past the cap
    assert merge.merge_tiles(48, 9, 32, 64) == (2, 32, 64)
    assert merge.merge_tiles(48, 9, 32, 64, max_programs=40) == (8, 32, 64)


@pytest.mark.parametrize("on", ["attention", "verify_attention", ""])
def test_merge_grid_cap_applies_only_to_a_launch_on_pdl(monkeypatch: pytest.MonkeyPatch, on: str) -> None:
    """``merge_splits(max_programs=)`` caps the grid of a launch that is on PDL, decided by the
    launch's own family and ``pdl`` (a verify merge launches in "verify_attention": with PDL on for
    that family alone, its merge is capped and an "attention" one is not); off PDL the tile rule's
    grid stands (the cap only paid on PDL)."""
    from updraft.attention.triton_kernels import merge
    from updraft.ops import triton_utils

    grids: list[tuple[int, int, int]] = []

    class Launch:
        def __getitem__(self, grid: tuple[int, int, int]):  # noqa: ANN204
            def run(*args: object, **kwargs: object) -> None:
                grids.append(grid)
                assert kwargs["PDL"] == (1 if grid[1] == 2 else 0)  # capped <=> on PDL
            return run

    monkeypatch.setattr(merge, "interpreting", lambda: False)
    monkeypatch.setattr(merge, "_merge_kernel", Launch())
    monkeypatch.setattr(triton_utils, "pdl_enabled", lambda device, family: family == on)
    mid_o, lse = torch.zeros(48, 9, 11, 64), torch.zeros(48, 9, 11)
    for family in ("attention", "verify_attention"):
        for pdl in (True, False):
            merge.merge_splits(mid_o, lse, torch.empty(48, 9, 64), family, pdl, max_programs=132)
            capped = pdl and family == on
            assert grids[-1] == (48, 2 if capped else 3, 1), (family, pdl)  # 8 heads a program, else the rule's 4

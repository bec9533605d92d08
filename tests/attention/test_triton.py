"""The triton backend under the Triton CPU interpreter, against the float64 reference.

TRITON_INTERPRET must be set before any triton kernel is defined, so it is set at the very top,
and it then holds for the whole pytest process. That is what CPU CI wants, but on a CUDA machine
it would turn every triton kernel of the run (ours, inductor's) into interpreted CPU code, so
there this module sets nothing and skips itself unless the caller set TRITON_INTERPRET=1; the
GPU tests live in ``test_triton_gpu.py``.

Interpreter limits: bf16 ``tl.dot`` is wrong in the interpreter, so under it the kernels upcast
bf16 dot operands to fp32 (``DOT_F32``); bf16 loads, casts and stores are still tested here, the
bf16 tensor-core dot only by ``test_triton_gpu.py``. fp16 dots are exact in the interpreter and
are tested. Block sizes are the interpreter's (16-key blocks), plus a few cases at the GPU tiles.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch  # does not import triton

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip(
        "CUDA is present: these are the CPU-interpreter tests (run them in their own process with "
        "TRITON_INTERPRET=1); the GPU tests are test_triton_gpu.py",
        allow_module_level=True,
    )

from updraft.attention.triton_backend import TritonBackend  # noqa: E402
from updraft.attention.triton_kernels import TileConfig  # noqa: E402
from updraft.attention.triton_kernels import decode as decode_kernels  # noqa: E402
from updraft.batch import REAL_MODES, ForwardBatch, ForwardMode  # noqa: E402
from updraft.kit import harness  # noqa: E402
from updraft.kit.cases import HEAD_LAYOUTS, LAYOUTS, AttnCase, sweep  # noqa: E402
from updraft.kit.harness import run_eager  # noqa: E402

if type(decode_kernels._decode_kernel).__name__ != "InterpretedFunction":
    pytest.skip(
        "triton kernels were defined before TRITON_INTERPRET was set; run this file on its own",
        allow_module_level=True,
    )

MODES = list(REAL_MODES)
HEADS = tuple(HEAD_LAYOUTS)


def interpreter_subset(mode: ForwardMode) -> list[AttnCase]:
    """A covering subset of the kit sweep that the interpreter runs in time.

    Every layout x {fp32, bf16}, with page size and head layout rotated so that each dtype meets
    both page sizes and all of MHA/GQA/MQA; every length set of the mode in each combination;
    plus one fp16 combination (the interpreter's fp16 dot is real, unlike its bf16 dot)."""
    cases: list[AttnCase] = []
    for li, layout in enumerate(LAYOUTS):
        for di, dtype in enumerate(("float32", "bfloat16")):
            idx = 2 * li + di
            cases += sweep(
                [mode],
                dtypes=(dtype,),
                page_sizes=((1, 16)[li % 2],),
                layouts=(layout,),
                head_layouts=(HEADS[idx % 3],),
            )
    cases += sweep([mode], dtypes=("float16",), page_sizes=(16,), layouts=("shuffled",), head_layouts=("gqa4",))
    return cases


def run_case(
    case: AttnCase,
    *,
    splits: int | None = None,
    tile: TileConfig | None = None,
    save_kv: bool = True,
    tree_mask: torch.Tensor | None = None,
    merge_in_kernel: bool | None = None,
) -> tuple[harness.CaseResult, TritonBackend, ForwardBatch, torch.Tensor]:
    setup = harness.build_case(case)
    if tree_mask is not None:
        setup.tree_mask = tree_mask
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
    backend.kv_splits_override = splits
    if merge_in_kernel is not None:
        backend.merge_in_kernel = merge_in_kernel
    if tile is not None:
        backend._tile = lambda use_decode, max_ext, bsz: tile  # type: ignore[method-assign]
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch, save_kv=save_kv)
    return harness.check_output(setup, batch, out, backend.scale), backend, batch, out


# ---- the kit sweep ------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_kit_sweep(mode: ForwardMode) -> None:
    cases = interpreter_subset(mode)
    assert len(cases) >= 30
    failures = [r.describe() for r in (run_eager("triton", c) for c in cases) if not r.ok]
    assert not failures, f"{len(failures)}/{len(cases)} failed; first: {failures[:3]}"


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_many_active_splits(mode: ForwardMode) -> None:
    """Long prefixes with a forced, non-power-of-two split count: several splits hold keys,
    trailing ones are empty, and the merge must weigh them by LSE."""
    ext = (1, 1) if mode.is_decode() else ((5, 5) if mode.is_fixed_stride(include_v2=True) else (9, 2))
    case = AttnCase(mode, 8, 2, 32, 16, (77, 20), ext, "float32", "shuffled")
    for splits in (3, 7):
        result, _, batch, _ = run_case(case, splits=splits)
        assert batch.attn_metadata.plan.num_kv_splits == splits
        assert result.ok, result.describe()


@pytest.mark.parametrize("merge_in_kernel", [False, True])
@pytest.mark.parametrize("mode", [ForwardMode.DECODE, ForwardMode.DRAFT_DECODE, ForwardMode.TARGET_VERIFY],
                         ids=lambda m: m.name)
def test_slots_prefetched_a_block_ahead(mode: ForwardMode, merge_in_kernel: bool) -> None:
    """The decode kernel's pipelined tile (3 stages: the next block's slots loaded in this one):
    splits ending inside a block and past the table row's last used entry, page sizes 1 and 16,
    1, 3 and 5 splits, equal the reference and the 2-stage tile (no prefetch)."""
    ext = (1, 1, 1) if mode.is_decode() else (4, 4, 4)
    for page in (1, 16):
        case = AttnCase(mode, 8, 2, 32, page, (70, 33, 5), ext, "float32", "shuffled")
        outs = []
        for stages in (3, 2):
            tile = TileConfig(block_rows=16, block_n=16, min_split=16, num_warps=4, num_stages=stages)
            for splits in (1, 3, 5):
                result, _, batch, out = run_case(case, splits=splits, tile=tile, merge_in_kernel=merge_in_kernel)
                assert batch.attn_metadata.plan.use_decode_kernel
                assert result.ok, (stages, splits, result.describe())
                outs.append(out)
        for a, b in zip(outs[:3], outs[3:]):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", [ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.TARGET_VERIFY])
@pytest.mark.parametrize("rows,keys", [(128, 64), (64, 64), (128, 128)])
def test_gpu_tile_config(mode: ForwardMode, rows: int, keys: int) -> None:
    """The GPU's block sizes (64- and 128-key blocks, 64- and 128-row extend tiles), run by the
    interpreter."""
    ext = (1, 1) if mode.is_decode() else ((4, 4) if mode.is_fixed_stride(include_v2=True) else (70, 3))
    case = AttnCase(mode, 8, 2, 64, 1, (130, 0), ext, "float16", "interleaved")
    tile = TileConfig(block_rows=rows, block_n=keys, min_split=2 * keys, num_warps=8, num_stages=2)
    for splits in (1, 2):
        result, *_ = run_case(case, splits=splits, tile=tile)
        assert result.ok, result.describe()


def test_eager_prefill_without_prefix_takes_one_split() -> None:
    """An eager extend whose requests have no cached prefix runs one split (the split policy
    would give several here: 64 SMs' worth of programs); with a prefix in one request, or under
    a graph's captured width, it keeps the policy's splits. Outputs match float64 each way."""
    for prefix, graph_width, want_one in (((0, 0), None, True), ((0, 50), None, False), ((0, 0), 48, False)):
        case = AttnCase(ForwardMode.EXTEND, 8, 2, 32, 16, prefix, (40, 30), "float32", "shuffled")
        setup = harness.build_case(case)
        be = TritonBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32)
        be.num_sms = 64
        batch = harness.make_batch(setup)
        if graph_width is not None:
            batch.max_extend_len = graph_width
        batch.attn_backend = be
        be.init_forward_metadata(batch)
        splits = batch.attn_metadata.plan.num_kv_splits
        assert (splits == 1) == want_one, (prefix, graph_width, splits)
        out = be.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
        result = harness.check_output(setup, batch, out, be.scale)
        assert result.ok, result.describe()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_split_extend_without_prefix_writes_its_output_itself(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """A split extend (a prefill graph's policy) beside a request with a prefix: the request with
    none has every key in its last split, which writes its output and marks its rows' lse +inf;
    the merge leaves those rows and merges the other request's. Whole: float64-exact. Without
    the merge launch: the first request's rows are final already, the second's still unwritten."""
    from updraft.attention.triton_kernels import extend as extend_kernels

    tile = TileConfig(block_rows=16, block_n=16, min_split=16, num_warps=1, num_stages=1)
    case = AttnCase(ForwardMode.EXTEND, 4, 2, 32, 16, (0, 37), (40, 30), dtype, "shuffled")
    result, _, batch, _ = run_case(case, splits=3, tile=tile)
    assert batch.attn_metadata.plan.num_kv_splits == 3
    assert result.ok, result.describe()

    monkeypatch.setattr(extend_kernels, "merge_splits", lambda *a, **k: None)
    setup = harness.build_case(case)
    be = TritonBackend(setup.kv_pool, setup.req_to_token, 4, 2, 32)
    be.kv_splits_override = 3
    be._tile = lambda use_decode, max_ext, bsz: tile  # type: ignore[method-assign]
    batch = harness.make_batch(setup)
    batch.attn_backend = be
    be.init_forward_metadata(batch)
    batch.attn_metadata.mid_lse.fill_(float("nan"))
    be._extend_out = lambda q, md, **_: torch.full((q.shape[0], 4, 32), float("nan"), dtype=q.dtype)  # type: ignore[method-assign]
    out = be.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    ref = harness.reference_output(setup, be.scale)
    tol = 1e-4 if dtype == "float32" else 2e-2
    assert harness.relative_error(out[:40], ref[:40]) < tol
    assert torch.isnan(out[40:]).all()
    lse = batch.attn_metadata.mid_lse[:70]
    assert torch.isinf(lse[:40, :, 2]).all() and (lse[:40, :, 2] > 0).all()
    assert torch.isneginf(lse[:40, :, :2]).all()
    assert torch.isfinite(lse[40:]).all()


def test_odd_head_shapes() -> None:
    """Group of 3 (padded to 4 head rows) and head_dim 40 (padded to 64): masked lanes."""
    for mode, ext in ((ForwardMode.DECODE, (1, 1)), (ForwardMode.EXTEND, (6, 17)), (ForwardMode.TARGET_VERIFY, (3, 3))):
        result, *_ = run_case(AttnCase(mode, 6, 2, 40, 16, (18, 33), ext, "float32", "nonmonotonic"))
        assert result.ok, result.describe()


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_extend_whole_blocks_and_the_diagonal(dtype: str, splits: int) -> None:
    """Prefill-sized blocks: the extend kernel's unmasked loops (whole prefix blocks, new-token
    blocks wholly before a tile's first token) beside the masked tail and causal diagonal. With
    16-key blocks and 8-token tiles, ext 70 gives tiles whose first token is past several whole
    blocks and tiles that start mid-block; prefixes 37 / 64 / 0 end mid-block, on a block edge
    and at nothing; head_dim 40 keeps the head-dim mask on the unmasked loads, 32 drops it."""
    tile = TileConfig(block_rows=16, block_n=16, min_split=16, num_warps=1, num_stages=1)
    for heads, kv_heads, dim in ((4, 2, 32), (6, 2, 40)):
        case = AttnCase(ForwardMode.EXTEND, heads, kv_heads, dim, 16, (37, 64, 0), (70, 33, 50), dtype, "shuffled")
        result, _, batch, _ = run_case(case, splits=splits, tile=tile)
        assert batch.attn_metadata.plan.num_kv_splits == splits
        assert result.ok, result.describe()


# ---- routing ------------------------------------------------------------------------------
def test_extend_modes_never_reach_decode_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failure class 5: DRAFT_EXTEND_V2 (and every extend mode) must use the extend kernel, and so
    must a verify block wider than ``max_decode_rows``. DECODE is the positive control."""
    calls: list[str] = []

    def forbidden(*args: object, **kwargs: object) -> None:
        calls.append("decode")
        raise AssertionError("decode kernel launched")

    monkeypatch.setattr(decode_kernels, "decode_attention", forbidden)
    monkeypatch.setattr(TritonBackend, "max_decode_rows", 15)  # 4 tokens x a group of 4 = 16 rows
    for mode, ext in (
        (ForwardMode.DRAFT_EXTEND_V2, (4, 4)),
        (ForwardMode.DRAFT_EXTEND, (3, 1)),
        (ForwardMode.EXTEND, (5, 2)),
        (ForwardMode.TARGET_VERIFY, (4, 4)),
    ):
        result, *_ = run_case(AttnCase(mode, 8, 2, 32, 16, (20, 3), ext))
        assert result.ok, result.describe()
    assert not calls
    with pytest.raises(AssertionError, match="decode kernel launched"):
        run_case(AttnCase(ForwardMode.DECODE, 8, 2, 32, 16, (20, 3), (1, 1)))


def test_verify_takes_the_decode_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain's verify block (tokens x group <= max_decode_rows) runs the decode kernel, causal
    in the block, never the extend kernel; its splits are merged by one merge launch (the
    default), and with ``merge_in_kernel`` in the same launch (no merge launch). Results match the
    reference with one split and with several (empty ones included)."""
    from updraft.attention.triton_kernels import extend as extend_kernels

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("extend kernel")

    merges: list[int] = []
    real_merge = decode_kernels.merge_splits

    def counted(*args: object, **kwargs: object) -> None:
        merges.append(1)
        real_merge(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(extend_kernels, "extend_attention", forbidden)
    monkeypatch.setattr(decode_kernels, "merge_splits", counted)
    for in_kernel in (False, True):
        for heads, kv_heads, prefix, splits in ((8, 2, (20, 3, 0), 1), (6, 2, (77, 18, 5), 3), (4, 4, (40, 1, 9), 7)):
            case = AttnCase(ForwardMode.TARGET_VERIFY, heads, kv_heads, 32, 16, prefix, (5,) * len(prefix), "float32",
                            "shuffled")
            merges.clear()
            result, _, batch, _ = run_case(case, splits=splits, merge_in_kernel=in_kernel)
            assert batch.attn_metadata.plan.use_decode_kernel and batch.attn_metadata.plan.num_kv_splits == splits
            assert result.ok, result.describe()
            assert len(merges) == (0 if in_kernel or splits == 1 else 1), (in_kernel, splits, merges)


def test_draft_decode_with_tree_takes_verify_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """DRAFT_DECODE with topk > 1 (a tree mask over its block) goes to the extend kernel."""
    monkeypatch.setattr(decode_kernels, "decode_attention", None)  # any call would fail
    case = AttnCase(ForwardMode.DRAFT_DECODE, 4, 1, 32, 1, (9, 30), (3, 3), "float32", "shuffled", tree=True)
    result, *_ = run_case(case)
    assert result.ok, result.describe()


# ---- masks, lengths, save_kv --------------------------------------------------------------
def test_tree_masks() -> None:
    """Random trees (the kit's) and two hand-made masks: siblings only (identity: every node sees
    only itself and the prefix) and a chain (equal to plain causal)."""
    s = 5
    case = AttnCase(ForwardMode.TARGET_VERIFY, 8, 2, 32, 16, (17, 0, 40), (s, s, s), "float32", "interleaved", tree=True)
    result, *_ = run_case(case)
    assert result.ok, result.describe()
    identity = torch.eye(s, dtype=torch.bool).expand(3, s, s).clone()
    chain = torch.ones(s, s, dtype=torch.bool).tril().expand(3, s, s).clone()
    for mask in (identity, chain):
        result, *_ = run_case(case, tree_mask=mask, splits=2)
        assert result.ok, result.describe()


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_empty_prefix_next_to_long(mode: ForwardMode) -> None:
    ext = (1, 1) if mode.is_decode() else ((4, 4) if mode.is_fixed_stride(include_v2=True) else (12, 1))
    result, _, batch, _ = run_case(AttnCase(mode, 8, 2, 32, 1, (0, 150), ext, "float32", "shuffled"))
    assert result.ok, result.describe()
    assert batch.attn_metadata.plan.num_kv_splits >= 1


@pytest.mark.parametrize("mode", [ForwardMode.DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.EXTEND])
def test_save_kv_false_leaves_pool_alone(mode: ForwardMode) -> None:
    ext = (1, 1) if mode.is_decode() else ((4, 4) if mode.is_fixed_stride(include_v2=True) else (6, 2))
    case = AttnCase(mode, 4, 4, 32, 16, (20, 3), ext)
    setup = harness.build_case(case)
    before = setup.kv_pool.k_buffer[0].clone()
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 4, 4, 32)
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch, save_kv=False)
    assert torch.equal(setup.kv_pool.k_buffer[0], before)
    ref = harness.reference_output(setup, backend.scale)
    assert harness.relative_error(out, ref) < 1e-4


def test_noncontiguous_qkv_views() -> None:
    """q/k/v as the model makes them: reshaped column slices of one fused qkv projection."""
    case = AttnCase(ForwardMode.EXTEND, 8, 2, 32, 16, (10, 0), (5, 9))
    setup = harness.build_case(case)
    t = setup.q.shape[0]
    fused = torch.cat([setup.q.reshape(t, -1), setup.k_new.reshape(t, -1), setup.v_new.reshape(t, -1)], dim=1)
    q, k, v = fused.split([8 * 32, 2 * 32, 2 * 32], dim=1)
    q, k, v = q.reshape(t, 8, 32), k.reshape(t, 2, 32), v.reshape(t, 2, 32)
    assert not k.is_contiguous()
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32)
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(q, k, v, 0, batch)
    result = harness.check_output(setup, batch, out, backend.scale)
    assert result.ok, result.describe()


# ---- graph-style padded rows and frozen host scalars ----------------------------------------
@pytest.mark.parametrize(
    "mode,ext,tree",
    [
        (ForwardMode.DECODE, 1, False),
        (ForwardMode.DRAFT_DECODE, 1, False),
        (ForwardMode.TARGET_VERIFY, 4, False),
        (ForwardMode.TARGET_VERIFY, 4, True),
        (ForwardMode.DRAFT_EXTEND_V2, 4, False),
    ],
)
def test_padded_graph_rows(monkeypatch: pytest.MonkeyPatch, mode: ForwardMode, ext: int, tree: bool) -> None:
    """Real rows match the reference, padded rows are finite, and the only slots written besides
    the real rows' ``out_cache_loc`` are slot 0 (scratch)."""
    # ForwardBatch.check_conventions rejects seq_lens < extend_seq_lens, which is exactly what a
    # padded row of a multi-token mode has (seq_lens = 1, extend = stride). The graph runner will
    # need it to accept padded rows; here it is bypassed for the padded batch only.
    monkeypatch.setattr(ForwardBatch, "check_conventions", lambda self: None)
    case = AttnCase(mode, 8, 2, 32, 1, (19, 6), (ext, ext), "float32", "shuffled", tree=tree)
    setup = harness.build_case(case)
    batch = harness.make_batch(setup)
    batch, q, k, v = harness.pad_like_graph(batch, 3, setup.q, setup.k_new, setup.v_new)
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32)
    k_before = setup.kv_pool.k_buffer[0].clone()
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    md = batch.attn_metadata
    # the metadata is the batch's own tensors; padded rows have seq_lens - ext < 0 where ext > 1,
    # so the kernels' clamp of the prefix is exercised
    assert md.seq_lens.data_ptr() == batch.seq_lens.data_ptr()
    assert (md.seq_lens - md.ext_lens).tolist() == [19, 6] + [1 - ext] * 3
    out = backend.forward(q, k, v, 0, batch)
    real = setup.q.shape[0]
    assert torch.isfinite(out).all()
    ref = harness.reference_output(setup, backend.scale)
    assert harness.relative_error(out[:real], ref) < 1e-4
    changed = (setup.kv_pool.k_buffer[0] != k_before).flatten(1).any(1).nonzero().flatten().tolist()
    allowed = set(batch.out_cache_loc[:real].tolist()) | {0}
    assert set(changed) <= allowed and 0 in changed


@pytest.mark.parametrize("save_kv", [True, False])
# The packed extends (EXTEND, DRAFT_EXTEND v1) leave rows past their lengths unwritten, so they are
# the ones that need the split lse seeded with -inf (the decode kernel and the fixed-stride extend
# write every row's). One split: a packed prefill's output is ``torch.empty`` by design
# (``_extend_out``: only the selected rows reach the LM head), so it has no zeros to check.
@pytest.mark.parametrize("mode,ext,splits", [
    (ForwardMode.DECODE, 1, 1), (ForwardMode.DECODE, 1, 3), (ForwardMode.TARGET_VERIFY, 4, 1),
    (ForwardMode.TARGET_VERIFY, 4, 3), (ForwardMode.EXTEND, 4, 3), (ForwardMode.DRAFT_EXTEND, 4, 1),
    (ForwardMode.DRAFT_EXTEND, 4, 3)])
def test_unseeded_zero_metadata_gives_zeros(
    monkeypatch: pytest.MonkeyPatch, mode: ForwardMode, ext: int, save_kv: bool, splits: int
) -> None:
    """Failure class 8: a capture with zero-length metadata must not produce NaN or garbage.
    Every ``torch.empty`` is poisoned (3.0) so that no unwritten buffer passes by luck; with no
    keys anywhere, every output row must be exactly 0."""
    real_empty = torch.empty

    def poisoned_empty(*args: object, **kwargs: object) -> torch.Tensor:
        t = real_empty(*args, **kwargs)  # type: ignore[call-overload]
        return t.fill_(3.0) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", poisoned_empty)
    case = AttnCase(mode, 8, 2, 32, 1, (19, 6), (ext, ext), "float32", "contiguous")
    setup = harness.build_case(case)
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32)
    backend.kv_splits_override = splits
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    md = batch.attn_metadata
    for t in (md.seq_lens, md.ext_lens, md.ext_start, md.req_pool_indices):
        t.zero_()
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch, save_kv=save_kv)
    assert torch.equal(out, torch.zeros_like(out))


def test_fixed_stride_host_scalars_ignore_lengths() -> None:
    """Failure class 6: in fixed-stride modes the launch plan depends on bs and stride only, so
    metadata built for one step can be refilled for another (graph replay) and stays correct;
    EXTEND's plan follows its lengths and a refill with a longer extend is refused."""
    a = AttnCase(ForwardMode.TARGET_VERIFY, 8, 2, 32, 16, (3, 40), (4, 4), "float32", "shuffled")
    b = AttnCase(ForwardMode.TARGET_VERIFY, 8, 2, 32, 16, (60, 0), (4, 4), "float32", "shuffled", seed=3)
    setup_a, setup_b = harness.build_case(a), harness.build_case(b)
    backend_a = TritonBackend(setup_a.kv_pool, setup_a.req_to_token, 8, 2, 32)
    batch_a = harness.make_batch(setup_a)
    backend_a.init_forward_metadata(batch_a)
    md = batch_a.attn_metadata
    # "Replay": b's values written into a's buffers by the same builder.
    backend_b = TritonBackend(setup_b.kv_pool, setup_b.req_to_token, 8, 2, 32)
    batch_b = harness.make_batch(setup_b)
    backend_b.req_to_token = setup_b.req_to_token
    assert backend_b._plan(batch_b) == md.plan
    backend_b._fill_metadata(batch_b, md)
    batch_b.attn_metadata = md
    out = backend_b.forward(setup_b.q, setup_b.k_new, setup_b.v_new, 0, batch_b)
    assert harness.check_output(setup_b, batch_b, out, backend_b.scale).ok

    e1 = harness.make_batch(harness.build_case(AttnCase(ForwardMode.EXTEND, 4, 4, 32, 16, (3,), (5,))))
    e2 = harness.make_batch(harness.build_case(AttnCase(ForwardMode.EXTEND, 4, 4, 32, 16, (3,), (40,))))
    backend_e = TritonBackend(setup_a.kv_pool, torch.zeros(4, 64, dtype=torch.int32), 4, 4, 32)
    backend_e.init_forward_metadata(e1)
    with pytest.raises(AssertionError, match="host scalars"):
        backend_e._fill_metadata(e2, e1.attn_metadata)


def test_forward_does_not_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata is built once per forward from host copies; layers never call .item()/.tolist()."""
    case = AttnCase(ForwardMode.TARGET_VERIFY, 8, 2, 32, 16, (30, 2), (4, 4))
    setup = harness.build_case(case)
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32)
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


def test_cpu_without_interpreter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = harness.build_case(AttnCase(ForwardMode.DECODE, 4, 4, 32, 1, (3,), (1,)))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1.*torch_native"):
        TritonBackend(setup.kv_pool, setup.req_to_token, 4, 4, 32)


def test_metadata_from_another_mode_is_refused() -> None:
    setup = harness.build_case(AttnCase(ForwardMode.DRAFT_EXTEND_V2, 4, 4, 32, 1, (3,), (4,)))
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 4, 4, 32)
    batch = harness.make_batch(setup)
    backend.init_forward_metadata(batch)
    batch.mode = ForwardMode.TARGET_VERIFY
    with pytest.raises(AssertionError, match="built for DRAFT_EXTEND_V2"):
        backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)


def test_kernels_compile_for_h100() -> None:
    """The interpreter accepts code that the compiler rejects: compile every kernel for sm_90 in a
    subprocess without TRITON_INTERPRET (no GPU needed; triton ships ptxas)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "updraft.attention.triton_kernels.compile_check"],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 and not any(line.startswith("ok ") for line in proc.stdout.splitlines()):
        pytest.skip(f"no CUDA compile toolchain in this triton install: {log[-400:]}")
    assert proc.returncode == 0, log[-3000:]


@pytest.mark.parametrize("heads,splits,dim", [(3, 7, 64), (16, 16, 512), (9, 32, 64)])
def test_merge_of_written_partials(heads: int, splits: int, dim: int) -> None:
    """``merge_splits(written=True)``, as the decode kernels launch it (every split wrote its
    partial, zeros where it held no key), loads the partials beside their lse: the same output as
    the gated merge, which never reads a split whose lse is -inf (NaN there changes nothing); a
    row without keys merges to 0."""
    from updraft.attention.triton_kernels.merge import merge_splits

    gen = torch.Generator().manual_seed(heads * splits)
    mid_o = torch.randn(3, heads, splits, dim, generator=gen)
    mid_lse = torch.randn(3, heads, splits, generator=gen) * 3
    dead = torch.rand(3, heads, splits, generator=gen) < 0.4
    dead[1, 0] = True  # a row without keys
    mid_lse[dead] = float("-inf")
    written, stale = mid_o.clone(), mid_o.clone()
    written[dead], stale[dead] = 0.0, float("nan")
    got, want = torch.full((3, heads, dim), 5.0), torch.full((3, heads, dim), 5.0)
    merge_splits(written, mid_lse, got, written=True)
    merge_splits(stale, mid_lse, want)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert not got[1, 0].any()

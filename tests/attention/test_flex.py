"""The flex backend on CPU against the float64 reference, plus its BlockMask and padding rules.

CPU runs eager flex (the unfused implementation), which evaluates the mask_mod over every
(query, slot) pair and IGNORES the BlockMask: the sweep proves the mask_mod, and separate tests
prove the block lists (exact against an independent visibility map) and that the compiled,
block-sparse CPU kernel both matches the reference and really skips unlisted blocks. Last, the
whole engine runs on flex (every forward mode, with a self-draft) and must emit the tokens of
the torch_native engine.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.nn.attention.flex_attention import create_mask

from updraft.attention.base import UnsupportedModeError
from updraft.attention.flex_backend import (
    KV_BLOCK,
    FlexBackend,
    FlexMetadata,
    build_metadata,
)
from updraft.batch import REAL_MODES, ForwardBatch, ForwardMode, make_forward_batch
from updraft.kit import harness
from updraft.kit.cases import HEAD_LAYOUTS, LAYOUTS, AttnCase, sweep
from updraft.kit.harness import CaseSetup, run_eager
from updraft.llm import LLM
from updraft.memory.pools import KVPool
from updraft.sampling_params import SamplingParams

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

MODES = list(REAL_MODES)
DTYPES = ("float32", "bfloat16")
#: Requests longer than one query tile (Q_BLOCK = 128 rows): several tiles per request,
#: causal block skipping between them, mixed long and short requests.
LONG_CASES = [
    AttnCase(ForwardMode.EXTEND, 8, 2, 32, 16, (0, 40, 5), (300, 150, 1), layout="shuffled"),
    AttnCase(ForwardMode.EXTEND, 4, 1, 32, 1, (129,), (257,), layout="nonmonotonic"),
    AttnCase(ForwardMode.DRAFT_EXTEND, 4, 4, 32, 16, (200, 0), (3, 140), layout="interleaved"),
]


def ci_subset(mode: ForwardMode, dtype: str) -> list[AttnCase]:
    """Every third case of the kit sweep (offset by dtype). The sweep lists the length sets of
    one (page, layout, heads) combination consecutively in blocks of 4 or 5 (3 divides neither),
    so a stride of 3 meets every length set, layout, head layout and page size, and the tree
    cases of TARGET_VERIFY; the test asserts that coverage."""
    cases = sweep([mode], dtypes=(dtype,))
    return cases[DTYPES.index(dtype) :: 3]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flex_matches_reference(mode: ForwardMode, dtype: str) -> None:
    cases = ci_subset(mode, dtype)
    assert {c.layout for c in cases} == set(LAYOUTS)
    assert {(c.num_heads, c.num_kv_heads) for c in cases} == set(HEAD_LAYOUTS.values())
    assert {c.page_size for c in cases} == {1, 16}
    all_lens = {
        (c.prefix_lens, c.extend_lens) for c in sweep([mode], dtypes=(dtype,)) if not c.tree
    }
    assert {(c.prefix_lens, c.extend_lens) for c in cases if not c.tree} == all_lens
    if mode == ForwardMode.TARGET_VERIFY:
        assert any(c.tree for c in cases)
    failures = [r.describe() for r in (run_eager("flex", c) for c in cases) if not r.ok]
    assert not failures, f"{len(failures)}/{len(cases)} failed; first: {failures[:3]}"


@pytest.mark.parametrize("case", LONG_CASES, ids=lambda c: c.name)
def test_flex_multi_query_block(case: AttnCase) -> None:
    for dtype in DTYPES:
        result = run_eager("flex", dataclasses.replace(case, dtype=dtype))
        assert result.ok, result.describe()


# ---- block mask ---------------------------------------------------------------------------


def _setup_and_metadata(setup: CaseSetup) -> tuple[ForwardBatch, FlexMetadata]:
    batch = harness.make_batch(setup)
    backend = FlexBackend(setup.kv_pool, setup.req_to_token, *_heads(setup.case))
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    return batch, batch.attn_metadata


def _heads(case: AttnCase) -> tuple[int, int, int]:
    return case.num_heads, case.num_kv_heads, case.head_dim


def _visible(setup: CaseSetup, tree: bool) -> list[torch.Tensor]:
    """Independent visibility per request, [extend, num_slots] bool, from the table and lengths."""
    case = setup.case
    out = []
    for b, (row, pre, ext) in enumerate(zip(setup.rows, case.prefix_lens, case.extend_lens)):
        slots = setup.req_to_token[row].long()
        vis = torch.zeros(ext, setup.kv_pool.num_slots, dtype=torch.bool)
        for i in range(ext):
            seen = torch.arange(pre + i + 1)
            if tree and setup.tree_mask is not None:
                in_block = seen >= pre
                seen = seen[~in_block | setup.tree_mask[b, i, (seen - pre).clamp(min=0)]]
            vis[i, slots[seen]] = True
        out.append(vis)
    return out


def _tiled(setup: CaseSetup, md: FlexMetadata, vis: list[torch.Tensor]) -> torch.Tensor:
    """Per-request visibility cut into the metadata's tiles: [C, W, num_slots] (pad rows False).
    Also checks the tile layout: ceil(extend / W) consecutive tiles per request."""
    ext = setup.case.extend_lens
    assert md.num_tiles == sum(-(-e // md.width) for e in ext)
    tiled = torch.zeros(md.num_tiles, md.width, md.num_slots, dtype=torch.bool)
    c = 0
    for r, e in enumerate(ext):
        for q0 in range(0, e, md.width):
            assert (int(md.tile_req[c]), int(md.tile_q0[c])) == (r, q0)
            rows = vis[r][q0 : q0 + md.width]
            tiled[c, : rows.shape[0]] = rows
            c += 1
    return tiled


def _listed(md: FlexMetadata) -> torch.Tensor:
    """The BlockMask's listed blocks as a dense [C, nkb] map."""
    num_tiles, nkb = md.num_tiles, md.kv_indices.shape[-1]
    listed = torch.zeros(num_tiles, nkb, dtype=torch.bool)
    for c in range(num_tiles):
        n = int(md.kv_num_blocks[c, 0, 0])
        idx = md.kv_indices[c, 0, 0]
        assert sorted(idx.tolist()) == list(range(nkb)), "kv_indices must be a permutation"
        listed[c, idx[:n].long()] = True
    return listed


def _block_any(tiled: torch.Tensor, nkb: int) -> torch.Tensor:
    num_tiles, width, n = tiled.shape
    padded = torch.zeros(num_tiles, width, nkb * KV_BLOCK, dtype=torch.bool)
    padded[:, :, :n] = tiled
    return padded.view(num_tiles, width, nkb, KV_BLOCK).any(3).any(1)


BLOCK_CASES = [
    *LONG_CASES,
    AttnCase(
        ForwardMode.TARGET_VERIFY, 4, 2, 32, 16, (17, 3), (5, 5), layout="shuffled", tree=True
    ),
    *(c for c in sweep(MODES, dtypes=("float32",), head_layouts=("gqa4",)) if c.seed in (2, 3)),
]


@pytest.mark.parametrize("case", BLOCK_CASES, ids=lambda c: c.name)
def test_block_mask_lists_exactly_the_visible_blocks(case: AttnCase) -> None:
    setup = harness.build_case(case)
    _, md = _setup_and_metadata(setup)
    for t in (md.kv_num_blocks, md.kv_indices, md.slot_req, md.slot_pos, md.tile_req, md.tile_base):
        assert t.is_contiguous()  # the compiled kernels misread strided block lists
    causal = _tiled(setup, md, _visible(setup, tree=False))
    # Exact at block granularity for the causal visibility; the tree only narrows inside blocks.
    assert torch.equal(_listed(md), _block_any(causal, md.kv_indices.shape[-1]))
    # The mask_mod itself, on real query rows, is the (tree) visibility map.
    mask = create_mask(md.block_mask.mask_mod, md.num_tiles, 1, md.width, md.num_slots)[:, 0]
    real = (md.tile_q0[:, None] + torch.arange(md.width)[None, :]).long() < torch.tensor(
        case.extend_lens
    )[md.tile_req.long()][:, None]
    assert torch.equal(mask & real[:, :, None], _tiled(setup, md, _visible(setup, tree=True)))


def enlarge_pool(setup: CaseSetup, factor: int, seed: int = 0) -> CaseSetup:
    """The same case in a pool ``factor`` times larger: pages moved to random places, every other
    slot poisoned. Only the slot numbers change, so the reference is unchanged."""
    old = setup.kv_pool
    p = old.page_size
    gen = torch.Generator().manual_seed(seed)
    num_pages = old.num_pages * factor
    page_map = torch.cat(
        [
            torch.zeros(1, dtype=torch.long),
            torch.randperm(num_pages - 1, generator=gen)[: old.num_pages - 1] + 1,
        ]
    )
    pool = KVPool(1, num_pages, p, old.kv_heads, old.head_dim, old.dtype, old.device)
    pool.k_buffer[0].fill_(7.0)
    pool.v_buffer[0].fill_(-7.0)
    src = torch.arange(old.num_slots)
    dst = page_map[src // p] * p + src % p
    pool.k_buffer[0][dst] = old.k_buffer[0]
    pool.v_buffer[0][dst] = old.v_buffer[0]
    table = setup.req_to_token.long()
    table = (page_map[table // p] * p + table % p).to(torch.int32)
    return dataclasses.replace(setup, kv_pool=pool, req_to_token=table)


@pytest.mark.parametrize("mode", [ForwardMode.DECODE, ForwardMode.EXTEND], ids=lambda m: m.name)
def test_large_pool_is_sparse(mode: ForwardMode) -> None:
    ext = (1, 1, 1) if mode == ForwardMode.DECODE else (5, 1, 30)
    case = AttnCase(mode, 8, 2, 32, 16, (100, 17, 60), ext, layout="shuffled")
    setup = enlarge_pool(harness.build_case(case), factor=64)
    assert setup.kv_pool.num_slots >= 64 * KV_BLOCK
    batch, md = _setup_and_metadata(setup)
    assert md.block_sparsity() > 0.8, md.block_sparsity()
    out = batch.attn_backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    result = harness.check_output(setup, batch, out, batch.attn_backend.scale)
    assert result.ok, result.describe()


# ---- padded graph rows, save_kv, modes ----------------------------------------------------


def _padded_batch(
    setup: CaseSetup, n_pad: int
) -> tuple[ForwardBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``setup``'s batch plus ``n_pad`` padded graph rows: req_pool_indices 0, seq_lens 1 (the
    fill value), extend = the stride, so every slot they read and write is the scratch slot 0."""
    case = setup.case
    stride = case.stride
    gen = torch.Generator().manual_seed(5)
    extra = n_pad * stride
    q = torch.cat(
        [
            setup.q,
            torch.randn(extra, case.num_heads, case.head_dim, generator=gen).to(setup.q.dtype),
        ]
    )
    k = torch.cat(
        [
            setup.k_new,
            torch.randn(extra, case.num_kv_heads, case.head_dim, generator=gen).to(setup.q.dtype),
        ]
    )
    v = torch.cat(
        [
            setup.v_new,
            torch.randn(extra, case.num_kv_heads, case.head_dim, generator=gen).to(setup.q.dtype),
        ]
    )
    batch = make_forward_batch(
        case.mode,
        torch.zeros(q.shape[0], dtype=torch.long),
        torch.tensor(setup.rows + [0] * n_pad),
        torch.tensor(list(case.seq_lens) + [FlexBackend.fill_seq_len] * n_pad),
        torch.tensor(list(case.extend_lens) + [stride] * n_pad),
        setup.req_to_token,
        logits="none",
        stride=stride,
    )
    # Padded rows have seq_lens (fill 1) < extend_seq_lens (stride) when stride > 1: allowed
    # past real_batch_size only.
    batch.real_batch_size = case.batch_size
    return batch, q, k, v


@pytest.mark.parametrize("stride", [1, 4])
def test_padded_rows_are_finite(stride: int) -> None:
    mode = ForwardMode.DECODE if stride == 1 else ForwardMode.TARGET_VERIFY
    case = AttnCase(mode, 8, 2, 32, 16, (20, 33), (stride, stride), layout="shuffled")
    setup = harness.build_case(case)
    batch, q, k, v = _padded_batch(setup, n_pad=3)
    backend = FlexBackend(setup.kv_pool, setup.req_to_token, *_heads(case))
    backend.init_forward_metadata(batch)
    md: FlexMetadata = batch.attn_metadata
    assert int(md.slot_req[0]) == -1, "the scratch slot must belong to no request"
    out = backend.forward(q, k, v, 0, batch)
    assert torch.isfinite(out).all()
    real = setup.q.shape[0]
    ref = harness.reference_output(setup, backend.scale)
    assert harness.relative_error(out[:real], ref) <= 1e-4
    assert torch.equal(out[real:], torch.zeros_like(out[real:]))  # they see nothing: flex gives 0


def test_save_kv_false_leaves_pool_untouched() -> None:
    case = AttnCase(ForwardMode.TARGET_VERIFY, 4, 2, 32, 16, (17, 40), (4, 4), layout="interleaved")
    setup = harness.build_case(case)
    before = setup.kv_pool.k_buffer[0].clone()
    batch, md = _setup_and_metadata(setup)
    out = batch.attn_backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch, save_kv=False)
    assert torch.equal(setup.kv_pool.k_buffer[0], before)
    assert (
        harness.relative_error(out, harness.reference_output(setup, batch.attn_backend.scale))
        <= 1e-4
    )


def test_copy_into_static_metadata() -> None:
    """The graph path: metadata of a second batch copied into the first one's tensors drives the
    first BlockMask (its mask_mod closes over those tensors) to the second batch's result."""
    a = harness.build_case(
        AttnCase(ForwardMode.DECODE, 4, 2, 32, 16, (30, 7), (1, 1), layout="shuffled")
    )
    b = harness.build_case(
        AttnCase(ForwardMode.DECODE, 4, 2, 32, 16, (30, 7), (1, 1), layout="interleaved", seed=3)
    )
    batch_a, md_a = _setup_and_metadata(a)
    batch_b = harness.make_batch(b)
    build_metadata(batch_b, b.req_to_token, md_a.num_slots, md_a.width, md_a.max_kv, out=md_a)
    batch_b.attn_metadata = md_a
    backend_b = FlexBackend(b.kv_pool, b.req_to_token, 4, 2, 32)
    out = backend_b.forward(b.q, b.k_new, b.v_new, 0, batch_b)
    assert harness.check_output(b, batch_b, out, backend_b.scale).ok
    with pytest.raises(ValueError):
        build_metadata(
            batch_b, b.req_to_token, md_a.num_slots, md_a.width, md_a.max_kv + 1, out=md_a
        )


def test_modes_and_metadata_guard() -> None:
    assert set(MODES) == set(FlexBackend.supported_modes)
    assert ForwardMode.IDLE not in FlexBackend.supported_modes
    setup = harness.build_case(AttnCase(ForwardMode.DECODE, 4, 4, 32, 1, (3,), (1,)))
    backend = FlexBackend(setup.kv_pool, setup.req_to_token, 4, 4, 32)
    batch = harness.make_batch(setup)
    batch.mode = ForwardMode.IDLE
    with pytest.raises(UnsupportedModeError):
        backend.init_forward_metadata(batch)
    batch.mode = ForwardMode.DECODE
    with pytest.raises(TypeError):  # metadata of another backend (or none) is refused
        backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)


# ---- compiled flex on CPU (the fused, block-sparse kernel) --------------------------------


def test_compiled_cpu_kernel_uses_the_block_mask() -> None:
    """One compile (~10-20 s): two slot layouts of one shape in a large pool, then a mutation
    (request 0's block list emptied) that the compiled kernel must obey, unlike eager flex."""
    results = []
    for layout in ("shuffled", "interleaved", "shuffled"):
        case = AttnCase(ForwardMode.DECODE, 8, 2, 32, 16, (200, 17, 90), (1, 1, 1), layout=layout)
        setup = enlarge_pool(harness.build_case(case), factor=8)
        backend = FlexBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32, use_compile=True)
        assert backend.compiled
        batch = harness.make_batch(setup)
        backend.init_forward_metadata(batch)
        if len(results) == 2:
            batch.attn_metadata.kv_num_blocks[0] = 0
        out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
        results.append((harness.check_output(setup, batch, out, backend.scale), out))
    assert results[0][0].ok, results[0][0].describe()
    assert results[1][0].ok, results[1][0].describe()
    mutated, out = results[2]
    assert not mutated.ok and torch.equal(out[0], torch.zeros_like(out[0]))


# ---- the engine on flex (CPU, eager flex) --------------------------------------------------


@pytest.mark.parametrize("spec", [None, "v1", "v2"])
def test_engine_greedy_tokens_match_torch_native(
    tiny_checkpoint,  # noqa: ANN001
    monkeypatch: pytest.MonkeyPatch,
    spec: str | None,
) -> None:
    """Every mode through the real engine: prefill (chunked), decode and, with a self-draft,
    TARGET_VERIFY + DRAFT_EXTEND (v1) or DRAFT_EXTEND_V2 + DRAFT_DECODE; fp32 greedy tokens
    must equal the torch_native engine's."""
    folder = str(tiny_checkpoint("llama"))
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    ps = [[3, 1, 4, 1, 5, 9, 2, 6], [7] * 23, [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9]]
    kw: dict = {"device": "cpu", "progress": False, "chunked_prefill_size": 16}
    ref = [o.outputs[0].token_ids for o in LLM(folder, **kw).generate(ps, greedy)]
    if spec is not None:
        kw["speculative_config"] = {
            "method": "standalone",
            "draft_model": folder,
            "num_steps": 3,
            "draft_extend": spec,
            "adaptive": False,  # every mode below runs: a fixed chain, not what adaptive S would pick
        }
    seen: set[ForwardMode] = set()
    init = FlexBackend.init_forward_metadata

    def spy(self: FlexBackend, batch: ForwardBatch) -> None:
        seen.add(batch.mode)
        init(self, batch)

    monkeypatch.setattr(FlexBackend, "init_forward_metadata", spy)
    llm = LLM(folder, attention_backend="flex", **kw)
    assert llm.engine.backend_name == "flex"
    assert [o.outputs[0].token_ids for o in llm.generate(ps, greedy)] == ref
    expected = {
        None: {ForwardMode.EXTEND, ForwardMode.DECODE},
        "v1": {ForwardMode.EXTEND, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND},
        "v2": {ForwardMode.EXTEND, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND_V2},
    }[spec]
    if spec is not None:
        expected.add(ForwardMode.DRAFT_DECODE)
    assert expected <= seen, seen

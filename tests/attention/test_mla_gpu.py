"""The ``mla`` backend on CUDA: the kit's full MLA sweep (fp32 + bf16, 32 + 16 and the real 512 + 64
widths) against the float64 reference and torch_native, DeepSeek shapes at long contexts with the
GPU's tiles and naturally chosen splits, padded graph rows, and real CUDA graphs captured and
replayed by the kit's graph harness (new lengths through the same metadata buffers).

Run in its own pytest process (``test_mla.py`` sets TRITON_INTERPRET on CPU-only machines; this
file skips itself when the kernels are interpreted).
"""

from __future__ import annotations

import pytest
import torch

from updraft.batch import REAL_MODES, ForwardBatch, ForwardMode
from updraft.kit import harness
from updraft.kit.cases import TOLERANCE, AttnCase, eager_cases, graph_cases

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MODES = list(REAL_MODES)
DEV = "cuda"
M = ForwardMode


@pytest.fixture(autouse=True, scope="module")
def _compiled_kernels() -> None:
    pytest.importorskip("triton")
    from updraft.attention.triton_kernels import mla_decode

    if type(mla_decode._mla_decode_kernel).__name__ == "InterpretedFunction":
        pytest.skip("triton kernels are interpreted (TRITON_INTERPRET set): run this file on its own")


def run_backend(name: str, case: AttnCase) -> tuple[torch.Tensor, harness.CaseResult]:
    from updraft.attention import backend_class

    setup = harness.build_case(case, DEV)
    backend = backend_class(name)(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    torch.cuda.synchronize()
    return out, harness.check_output(setup, batch, out, backend.scale)


def check_against_both(case: AttnCase) -> list[str]:
    out, result = run_backend("mla", case)
    problems = [] if result.ok else [result.describe()]
    native, _ = run_backend("torch_native", case)
    diff = (out.double() - native.double()).abs().max().item() / (native.double().abs().max().item() or 1.0)
    if not diff <= TOLERANCE[case.dtype]:
        problems.append(f"{case.name}: mla vs torch_native rel diff {diff:.2e}")
    return problems


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_full_sweep(mode: ForwardMode, dtype: str) -> None:
    cases = [c for c in eager_cases(mode, "full", "mla") if c.dtype == dtype]
    problems = [p for c in cases for p in check_against_both(c)]
    assert not problems, f"{len(problems)} problems over {len(cases)} cases; first: {problems[:3]}"


def deepseek(mode: ForwardMode, heads: int, page: int, prefix: tuple[int, ...], ext: tuple[int, ...], dtype: str,
             layout: str = "shuffled", tree: bool = False) -> AttnCase:
    return AttnCase(mode, heads, 1, 576, page, prefix, ext, dtype, layout, tree=tree, v_head_dim=512, shared_kv=True)


def deepseek_cases(dtype: str) -> list[AttnCase]:
    """V2-Lite (16 heads) and V3 (128 heads) at long contexts: the GPU's tiles and the split
    policy's own counts (no override)."""
    return [
        deepseek(M.DECODE, 16, 1, (4000, 17, 0, 1000), (1, 1, 1, 1), dtype),
        deepseek(M.DECODE, 128, 16, (6000, 300), (1, 1), dtype, "interleaved"),
        deepseek(M.DRAFT_DECODE, 16, 16, (2500, 33), (1, 1), dtype, "nonmonotonic"),
        deepseek(M.TARGET_VERIFY, 16, 1, (3000, 0, 64), (4, 4, 4), dtype),
        deepseek(M.TARGET_VERIFY, 128, 16, (2000, 5), (4, 4), dtype),
        deepseek(M.TARGET_VERIFY, 16, 16, (3000, 5), (6, 6), dtype, tree=True),
        deepseek(M.DRAFT_DECODE, 16, 16, (1500, 40), (4, 4), dtype, tree=True),
        deepseek(M.DRAFT_EXTEND_V2, 16, 16, (2000, 7), (5, 5), dtype, "interleaved"),
        deepseek(M.DRAFT_EXTEND, 128, 1, (500, 60), (3, 1), dtype, "contiguous"),
        deepseek(M.EXTEND, 16, 16, (0, 2000), (300, 129), dtype),
        deepseek(M.EXTEND, 128, 1, (100,), (90,), dtype, "nonmonotonic"),
    ]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_deepseek_shapes(dtype: str) -> None:
    problems = [p for c in deepseek_cases(dtype) for p in check_against_both(c)]
    assert not problems, problems


@pytest.mark.parametrize("mode,s", [(M.DECODE, 1), (M.TARGET_VERIFY, 4), (M.DRAFT_EXTEND_V2, 4)])
def test_padded_graph_rows(monkeypatch: pytest.MonkeyPatch, mode: ForwardMode, s: int) -> None:
    """Padded rows as the graph runner writes them: finite, real rows right, only the scratch
    slot written besides the real slots (an out-of-bounds read here is an illegal address)."""
    from updraft.attention.mla_backend import MLABackend

    monkeypatch.setattr(ForwardBatch, "check_conventions", lambda self: None)
    case = deepseek(mode, 16, 16, (300, 9), (s, s), "bfloat16")
    setup = harness.build_case(case, DEV)
    batch, q, k, _ = harness.pad_like_graph(harness.make_batch(setup), 6, setup.q, setup.k_new, setup.v_new)
    backend = MLABackend(setup.kv_pool, setup.req_to_token, 16, 1, 576)
    before = setup.kv_pool.k_buffer[0].clone()
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(q, k, k[..., :512], 0, batch)
    torch.cuda.synchronize()
    real = setup.q.shape[0]
    assert torch.isfinite(out).all()
    assert harness.relative_error(out[:real], harness.reference_output(setup, backend.scale)) < TOLERANCE["bfloat16"]
    changed = set((setup.kv_pool.k_buffer[0] != before).flatten(1).any(1).nonzero().flatten().tolist())
    assert changed <= set(batch.out_cache_loc[:real].tolist()) | {0}


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_real_cuda_graphs(mode: ForwardMode) -> None:
    """The kit's ``graph`` runner on CUDA: capture at 1x / 2x / 4x the batch, replay with new
    lengths and poisoned static inputs, against the reference and the eager forward."""
    from updraft.kit.graph_harness import run_graph

    cases = graph_cases(mode, "quick", "mla") + [c for c in graph_cases(mode, "full", "mla") if c.head_dim == 576][:2]
    results = [run_graph("mla", c, mult, pad, DEV) for c in cases for pad, mult in (("fill", 1), ("fill", 4), ("real", 2))]
    bad = [r.describe() for r in results if not r.ok]
    assert not bad, bad[:3]


def test_early_metadata_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decode kernel's default form (the lengths and pool rows read before the PDL wait) against
    the plain form on the decode-kernel DeepSeek shapes: the same output, bit for bit (the same
    loop; only loads before it moved)."""
    from updraft.attention.mla_backend import MLABackend

    assert MLABackend.decode_early_metadata
    for case in [c for c in deepseek_cases("bfloat16") if c.mode in (M.DECODE, M.DRAFT_DECODE, M.TARGET_VERIFY)]:
        early, result = run_backend("mla", case)
        assert result.ok, result.describe()
        monkeypatch.setattr(MLABackend, "decode_early_metadata", False)
        plain, _ = run_backend("mla", case)
        monkeypatch.setattr(MLABackend, "decode_early_metadata", True)
        assert torch.equal(early, plain), (case.name, (early.float() - plain.float()).abs().max().item())

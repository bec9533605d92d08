"""The triton backend on CUDA: the full kit sweep (fp32 + bf16) against the float64 reference and
against torch_native, Llama-shaped cases at GPU tile sizes, padded graph rows, and a real CUDA
graph replayed with new lengths through the same metadata builder.

Run in its own pytest process: ``test_triton.py`` sets TRITON_INTERPRET on CPU-only machines,
and interpreted kernels would make this file meaningless (it skips itself then).
"""

from __future__ import annotations

import pytest
import torch

from updraft.batch import REAL_MODES, ForwardBatch, ForwardMode, make_forward_batch
from updraft.kit import harness
from updraft.kit.cases import TOLERANCE, AttnCase, sweep

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MODES = list(REAL_MODES)
DEV = "cuda"


@pytest.fixture(autouse=True, scope="module")
def _compiled_kernels() -> None:
    pytest.importorskip("triton")
    from updraft.attention.triton_kernels import decode

    if type(decode._decode_kernel).__name__ == "InterpretedFunction":
        pytest.skip("triton kernels are interpreted (TRITON_INTERPRET set): run this file on its own")


def run_backend(name: str, case: AttnCase, tree_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, harness.CaseResult]:
    from updraft.attention import backend_class

    setup = harness.build_case(case, DEV)
    if tree_mask is not None:
        setup.tree_mask = tree_mask.to(DEV)
    backend = backend_class(name)(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    torch.cuda.synchronize()
    return out, harness.check_output(setup, batch, out, backend.scale)


def check_against_both(case: AttnCase) -> list[str]:
    out, result = run_backend("triton", case)
    problems = [] if result.ok else [result.describe()]
    native, _ = run_backend("torch_native", case)
    denom = native.double().abs().max().item() or 1.0
    diff = (out.double() - native.double()).abs().max().item() / denom
    if not diff <= TOLERANCE[case.dtype]:
        problems.append(f"{case.name}: triton vs torch_native rel diff {diff:.2e}")
    return problems


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_full_sweep(mode: ForwardMode, dtype: str) -> None:
    cases = sweep([mode], dtypes=(dtype,))
    problems = [p for c in cases for p in check_against_both(c)]
    assert not problems, f"{len(problems)} problems over {len(cases)} cases; first: {problems[:3]}"


def llama_cases(dtype: str) -> list[AttnCase]:
    """Llama-3-8B heads (32 q / 8 kv, head_dim 128) with long contexts: real GPU tiles and
    naturally chosen split counts (no override)."""
    m = ForwardMode
    return [
        AttnCase(m.DECODE, 32, 8, 128, 1, (4000, 17, 0, 1000), (1, 1, 1, 1), dtype, "shuffled"),
        AttnCase(m.DECODE, 32, 8, 128, 16, (6000,), (1,), dtype, "interleaved"),
        AttnCase(m.DRAFT_DECODE, 32, 8, 128, 16, (2500, 33), (1, 1), dtype, "nonmonotonic"),
        AttnCase(m.TARGET_VERIFY, 32, 8, 128, 1, (3000, 0, 64), (4, 4, 4), dtype, "shuffled"),
        AttnCase(m.TARGET_VERIFY, 32, 8, 128, 16, (3000, 5), (6, 6), dtype, "shuffled", tree=True),
        AttnCase(m.DRAFT_DECODE, 32, 8, 128, 16, (1500, 40), (4, 4), dtype, "shuffled", tree=True),
        AttnCase(m.DRAFT_EXTEND_V2, 32, 8, 128, 16, (2000, 7), (5, 5), dtype, "interleaved"),
        AttnCase(m.DRAFT_EXTEND, 32, 8, 128, 1, (500, 60), (3, 1), dtype, "contiguous"),
        AttnCase(m.EXTEND, 32, 8, 128, 16, (0, 2000), (300, 129), dtype, "shuffled"),
        AttnCase(m.EXTEND, 32, 32, 64, 1, (100,), (700,), dtype, "nonmonotonic"),
        AttnCase(m.EXTEND, 16, 1, 256, 16, (40,), (200,), dtype, "shuffled"),
    ]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_llama_shapes(dtype: str) -> None:
    problems = [p for c in llama_cases(dtype) for p in check_against_both(c)]
    assert not problems, problems


@pytest.mark.parametrize("mode,s", [(ForwardMode.DECODE, 1), (ForwardMode.TARGET_VERIFY, 4), (ForwardMode.DRAFT_EXTEND_V2, 4)])
def test_padded_graph_rows(monkeypatch: pytest.MonkeyPatch, mode: ForwardMode, s: int) -> None:
    """Padded rows (seq_lens = 1, req_pool_indices = 0, out_cache_loc = 0, extend = stride):
    finite, real rows exact, only slot 0 written besides the real slots. On the GPU an
    out-of-bounds read here is an illegal address, which the interpreter cannot show."""
    from updraft.attention.triton_backend import TritonBackend

    case = AttnCase(mode, 32, 8, 128, 16, (300, 9), (s, s), "bfloat16", "shuffled")
    setup = harness.build_case(case, DEV)
    pad, real_tokens = 6, 2 * s
    seq_cpu = torch.tensor([300 + s, 9 + s] + [1] * pad, dtype=torch.int32)
    ext_cpu = torch.full((2 + pad,), s, dtype=torch.int32)
    rows = torch.tensor(setup.rows + [0] * pad, device=DEV)
    n = (2 + pad) * s
    gen = torch.Generator(device=DEV).manual_seed(0)

    q, k, v = (
        torch.cat([x, torch.randn((n - real_tokens, *x.shape[1:]), device=DEV, generator=gen).to(x.dtype)])
        for x in (setup.q, setup.k_new, setup.v_new)
    )
    # make_forward_batch reads out_cache_loc from the table: padded rows read row 0 (all zeros,
    # at negative positions that wrap), i.e. slot 0, as the graph runner will write them.
    batch = make_forward_batch(
        mode, torch.zeros(n, dtype=torch.long, device=DEV), rows, seq_cpu, ext_cpu, setup.req_to_token,
        logits="none", stride=s,
    )
    # check_conventions rejects padded rows of multi-token modes (seq_lens 1 < extend = stride).
    monkeypatch.setattr(ForwardBatch, "check_conventions", lambda self: None)
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 32, 8, 128)
    before = setup.kv_pool.k_buffer[0].clone()
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(q, k, v, 0, batch)
    torch.cuda.synchronize()
    monkeypatch.undo()
    assert torch.isfinite(out).all()
    ref = harness.reference_output(setup, backend.scale)
    assert harness.relative_error(out[:real_tokens], ref) < TOLERANCE["bfloat16"]
    changed = set((setup.kv_pool.k_buffer[0] != before).flatten(1).any(1).nonzero().flatten().tolist())
    assert changed <= set(batch.out_cache_loc[:real_tokens].tolist()) | {0}


@pytest.mark.parametrize("mode,stride", [(ForwardMode.DECODE, 1), (ForwardMode.TARGET_VERIFY, 4), (ForwardMode.DRAFT_EXTEND_V2, 4)])
def test_cuda_graph_replay_with_new_lengths(mode: ForwardMode, stride: int) -> None:
    """Capture one forward, then refill the SAME metadata buffers for other lengths with
    ``_fill_metadata`` and replay: a kernel argument that secretly depended on per-step lengths
    would give wrong output here (failure class 6), which an eager test cannot see."""
    from updraft.attention.reference import reference_attention
    from updraft.attention.triton_backend import TritonBackend

    case = AttnCase(mode, 32, 8, 128, 1, (3000, 900), (stride, stride), "bfloat16", "shuffled")
    setup = harness.build_case(case, DEV)
    backend = TritonBackend(setup.kv_pool, setup.req_to_token, 32, 8, 128)
    rows = torch.tensor(setup.rows, device=DEV)
    gen = torch.Generator(device=DEV).manual_seed(1)
    q_s = torch.empty(2 * stride, 32, 128, dtype=torch.bfloat16, device=DEV)
    k_s = torch.empty(2 * stride, 8, 128, dtype=torch.bfloat16, device=DEV)
    v_s = torch.empty_like(k_s)

    def step(prefix: tuple[int, int]) -> tuple[ForwardBatch, torch.Tensor]:
        """Load a step with the given prefixes into the static q/k/v; return its batch and ref."""
        seq = torch.tensor([p + stride for p in prefix], dtype=torch.int32)
        ext = torch.full((2,), stride, dtype=torch.int32)
        batch = make_forward_batch(
            mode, torch.zeros(2 * stride, dtype=torch.long, device=DEV), rows, seq, ext, setup.req_to_token,
            logits="none", stride=stride,
        )
        refs = []
        for i, p in enumerate(prefix):
            q = torch.randn(stride, 32, 128, device=DEV, generator=gen).to(torch.bfloat16)
            q_s[i * stride : (i + 1) * stride] = q
            k_s[i * stride : (i + 1) * stride] = setup.k_full[i][p : p + stride].to(DEV)
            v_s[i * stride : (i + 1) * stride] = setup.v_full[i][p : p + stride].to(DEV)
            refs.append(reference_attention(q.cpu(), setup.k_full[i][: p + stride], setup.v_full[i][: p + stride], backend.scale))
        return batch, torch.cat(refs)

    static, ref0 = step((2000, 5))
    static.attn_backend = backend
    backend.init_forward_metadata(static)
    md = static.attn_metadata
    torch.cuda.synchronize()
    for _ in range(2):  # compile outside the capture
        backend.forward(q_s, k_s, v_s, 0, static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = backend.forward(q_s, k_s, v_s, 0, static)
    for prefix in ((2000, 5), (3000, 900), (17, 600)):
        batch, ref = step(prefix)
        for name in ("seq_lens", "extend_seq_lens", "extend_start_loc", "req_pool_indices", "out_cache_loc"):
            getattr(static, name).copy_(getattr(batch, name))
        static.seq_lens_cpu, static.extend_seq_lens_cpu = batch.seq_lens_cpu, batch.extend_seq_lens_cpu
        backend._fill_metadata(static, md)
        graph.replay()
        torch.cuda.synchronize()
        err = harness.relative_error(out, ref)
        assert err < TOLERANCE["bfloat16"], f"replay at prefix {prefix}: rel err {err:.2e}"

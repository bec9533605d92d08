"""The flex backend on CUDA (compiled flex, Triton kernels) against the float64 reference.

Run it on the GPU machine in its own pytest process (``test_triton.py`` sets TRITON_INTERPRET
for the whole process, which would interpret inductor's Triton kernels too)::

    python -m pytest -m gpu tests/attention/test_flex_gpu.py -q -rA

It prints a timing table (decode, bs 8 x 2k context, 32/8 heads, d128, bf16) against
torch_native, for a pool just large enough and for one 16x larger (block sparsity: the flex time
should not grow with the pool). Compiled variants are counted; the sweep raises dynamo's
recompile limit and makes hitting it an error, so a silent fallback to the unfused flex cannot
pass as a compiled result.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator

import pytest
import torch
from torch._dynamo.utils import counters

from updraft.attention.flex_backend import KV_BLOCK, FlexBackend
from updraft.attention.torch_native import TorchNativeBackend
from updraft.batch import REAL_MODES, ForwardMode
from updraft.kit import harness
from updraft.kit.cases import AttnCase, sweep
from updraft.kit.harness import CaseSetup, run_eager
from updraft.memory.pools import KVPool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip(
        "TRITON_INTERPRET is set in this process: run test_flex_gpu.py on its own",
        allow_module_level=True,
    )

MODES = list(REAL_MODES)
LONG_CASES = [  # several 128-row query tiles per request: the main flex kernel (W = 128)
    AttnCase(ForwardMode.EXTEND, 8, 2, 32, 16, (0, 40, 5), (300, 150, 1), layout="shuffled"),
    AttnCase(ForwardMode.EXTEND, 4, 1, 32, 1, (129,), (257,), layout="nonmonotonic"),
    AttnCase(ForwardMode.DRAFT_EXTEND, 4, 4, 32, 16, (200, 0), (3, 140), layout="interleaved"),
    AttnCase(ForwardMode.EXTEND, 32, 8, 128, 16, (1000, 0), (700, 513), layout="shuffled"),
]


@pytest.fixture(autouse=True)
def _no_tf32() -> None:
    # fp32 meets 1e-4 only with IEEE fp32 dots; the kernels read this at compile time.
    assert not torch.backends.cuda.matmul.allow_tf32, "TF32 is on: fp32 results would be ~1e-3"


@pytest.fixture(autouse=True, scope="module")
def _compile_budget() -> Iterator[None]:
    """The sweep meets many more variants (3 head layouts x 2 dtypes x tree x 0/1
    specialisations) than an engine process; past the limit torch would silently run the unfused
    flex. Raise the limit for this module and make hitting it an error."""
    cfg = torch._dynamo.config
    names = [n for n in ("recompile_limit", "fail_on_recompile_limit_hit") if hasattr(cfg, n)]
    saved = {n: getattr(cfg, n) for n in names}
    for n, value in zip(("recompile_limit", "fail_on_recompile_limit_hit"), (512, True)):
        if n in saved:
            setattr(cfg, n, value)
    yield
    for n, value in saved.items():
        setattr(cfg, n, value)


def _bigger_pool(setup: CaseSetup, factor: int, seed: int = 0) -> CaseSetup:
    """The same case with its pages moved at random into a pool ``factor`` times larger."""
    old = setup.kv_pool
    p, dev = old.page_size, old.device
    gen = torch.Generator().manual_seed(seed)
    num_pages = old.num_pages * factor
    perm = torch.randperm(num_pages - 1, generator=gen)[: old.num_pages - 1] + 1
    page_map = torch.cat([torch.zeros(1, dtype=torch.long), perm]).to(dev)
    pool = KVPool(1, num_pages, p, old.kv_heads, old.head_dim, old.dtype, dev)
    pool.k_buffer[0].fill_(7.0)
    pool.v_buffer[0].fill_(-7.0)
    src = torch.arange(old.num_slots, device=dev)
    dst = page_map[src // p] * p + src % p
    pool.k_buffer[0][dst] = old.k_buffer[0]
    pool.v_buffer[0][dst] = old.v_buffer[0]
    table = setup.req_to_token.long()
    table = (page_map[table // p] * p + table % p).to(torch.int32)
    return dataclasses.replace(setup, kv_pool=pool, req_to_token=table)


def _time_ms(fn: Callable[[], object], iters: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def _decode_timings(setup: CaseSetup) -> dict[str, float]:
    """Milliseconds per forward of one layer (KV store included) and per metadata build."""
    case = setup.case
    heads = (case.num_heads, case.num_kv_heads, case.head_dim)
    flex = FlexBackend(setup.kv_pool, setup.req_to_token, *heads)
    native = TorchNativeBackend(setup.kv_pool, setup.req_to_token, *heads)
    assert flex.compiled
    out: dict[str, float] = {}
    for name, backend in (("flex", flex), ("torch_native", native)):
        batch = harness.make_batch(setup)
        batch.attn_backend = backend
        out[f"{name} metadata"] = _time_ms(lambda b=backend, x=batch: b.init_forward_metadata(x))
        backend.init_forward_metadata(batch)
        result = harness.check_output(
            setup,
            batch,
            backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch),
            backend.scale,
        )
        assert result.ok, result.describe()
        out[f"{name} attention"] = _time_ms(
            lambda b=backend, x=batch: b.forward(setup.q, setup.k_new, setup.v_new, 0, x)
        )
    return out


@torch.inference_mode()
def test_decode_timing_vs_torch_native(capsys: pytest.CaptureFixture[str]) -> None:
    bs, ctx = 8, 2048
    case = AttnCase(
        ForwardMode.DECODE, 32, 8, 128, 16, (ctx - 1,) * bs, (1,) * bs, "bfloat16", "shuffled"
    )
    base = harness.build_case(case, "cuda")
    big = _bigger_pool(base, 16)
    rows = [
        (f"pool {base.kv_pool.num_slots} slots", _decode_timings(base)),
        (f"pool {big.kv_pool.num_slots} slots", _decode_timings(big)),
    ]
    with capsys.disabled():
        print(
            f"\nflex vs torch_native, DECODE bs {bs} x {ctx} ctx, 32/8 heads, d128, bf16, page 16"
        )
        print(f"  {torch.cuda.get_device_name()}, torch {torch.__version__}")
        print(f"  dynamo frames so far: {dict(counters['frames'])}")
        for label, t in rows:
            print(
                f"  {label:20s} flex {t['flex attention']:.3f} ms (+ metadata {t['flex metadata']:.3f})"
                f" | torch_native {t['torch_native attention']:.3f} ms"
                f" (+ metadata {t['torch_native metadata']:.3f})"
            )


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@torch.inference_mode()
def test_flex_cuda_matches_reference(mode: ForwardMode, dtype: str) -> None:
    cases = sweep([mode], dtypes=(dtype,))
    failures = [r.describe() for r in (run_eager("flex", c, "cuda") for c in cases) if not r.ok]
    assert not failures, f"{len(failures)}/{len(cases)} failed; first: {failures[:3]}"


@pytest.mark.parametrize("case", LONG_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@torch.inference_mode()
def test_flex_cuda_multi_query_block(case: AttnCase, dtype: str) -> None:
    result = run_eager("flex", dataclasses.replace(case, dtype=dtype), "cuda")
    assert result.ok, result.describe()


@pytest.mark.parametrize(
    "mode", [ForwardMode.DECODE, ForwardMode.TARGET_VERIFY], ids=lambda m: m.name
)
@torch.inference_mode()
def test_cuda_kernel_uses_the_block_mask(mode: ForwardMode) -> None:
    """A large pool is sparse and correct; emptying request 0's block list must zero its rows
    (the compiled kernel follows the BlockMask, unlike eager flex)."""
    stride = 1 if mode == ForwardMode.DECODE else 4
    case = AttnCase(
        mode, 8, 2, 32, 16, (200, 17, 90), (stride,) * 3, layout="shuffled", tree=stride > 1
    )
    setup = _bigger_pool(harness.build_case(case, "cuda"), 32)
    assert setup.kv_pool.num_slots >= 32 * KV_BLOCK
    for mutate in (False, True):
        backend = FlexBackend(setup.kv_pool, setup.req_to_token, 8, 2, 32)
        batch = harness.make_batch(setup)
        backend.init_forward_metadata(batch)
        assert batch.attn_metadata.block_sparsity() > 0.8
        if mutate:
            batch.attn_metadata.kv_num_blocks[0] = 0
        out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
        result = harness.check_output(setup, batch, out, backend.scale)
        assert torch.isfinite(out).all()
        if mutate:
            assert not result.ok and bool((out[:stride] == 0).all())
        else:
            assert result.ok, result.describe()

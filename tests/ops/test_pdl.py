"""Programmatic dependent launch (``ops.triton_utils``): when it is on (policy, on CPU), and on the
GPU that a whole model step captured in a CUDA graph gives bitwise the same logits with it on as
off, over many replays (a kernel that read its input before waiting on the kernel that writes
it would show as a changed row).

    pytest -m gpu tests/ops/test_pdl.py -s
"""

from __future__ import annotations

import pytest
import torch

from updraft.ops import triton_utils
from updraft.ops.triton_utils import pdl_enabled, pdl_opts, use_pdl


def test_off_on_cpu_and_under_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pdl_opts(torch.device("cpu"), "gemv") == {"PDL": 0}
    monkeypatch.setattr(triton_utils, "_major", lambda index: 9)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not pdl_enabled(torch.device("cuda", 0), "gemv")


@pytest.mark.parametrize("env,family,major,want", [
    ("1", "gemv", 9, True), ("1", "attention", 10, True), ("1", "sampling", 9, True), ("1", "elementwise", 9, False),
    ("all", "elementwise", 9, True), ("1", "gemv", 8, False), ("0", "gemv", 9, False), ("", "gemv", 9, False),
    ("gemv,sampling", "gemv", 9, True), ("gemv,sampling", "attention", 9, False),
    ("1", "verify_attention", 9, True), ("gemv,attention,sampling", "verify_attention", 9, False),
])
def test_policy(monkeypatch: pytest.MonkeyPatch, env: str, family: str, major: int, want: bool) -> None:
    """sm_90+ only; ``UPDRAFT_PDL`` = 0 / 1 (the default families: not elementwise) / all / the
    families to launch with it."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(triton_utils, "_major", lambda index: major)
    monkeypatch.setenv("UPDRAFT_PDL", env)
    dev = torch.device("cuda", 0)
    assert pdl_enabled(dev, family) is want
    opts = pdl_opts(dev, family, late=True)
    assert opts == ({"PDL": 2, "launch_pdl": True} if want else {"PDL": 0})
    assert pdl_opts(dev, family) == ({"PDL": 1, "launch_pdl": True} if want else {"PDL": 0})
    with use_pdl(not want):  # the override wins over the environment, and is undone after
        assert pdl_enabled(dev, family) is (not want and major >= 9 and family in triton_utils.DEFAULT_FAMILIES)
    assert pdl_enabled(dev, family) is want


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("width,bs", [(1, 1), (6, 2), (1, 8)])
def test_graph_replays_equal_with_and_without_pdl(tiny_checkpoint, width: int, bs: int) -> None:
    """Decode (and a 6-token verify) of the tiny Llama in bf16 on the fused layers, captured with
    PDL off and on: 30 replays of the PDL graph equal the other graph's logits bit for bit (the
    kernels and their configs are the same; only the launch order overlaps)."""
    from updraft import ops
    from updraft.batch import ForwardMode
    from updraft.memory.pools import PagedAllocator, ReqToTokenPool
    from updraft.models.loader import load_checkpoint
    from updraft.runtime.model_runner import ModelRunner

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("PDL needs sm_90+")
    model = load_checkpoint(tiny_checkpoint("llama"), dtype=torch.bfloat16, device="cuda", progress=False).model
    ctx = 300
    pool = ReqToTokenPool(bs + 1, ctx + 64, "cuda")
    alloc = PagedAllocator(pool, bs * (ctx + 64), 1)
    runner = ModelRunner(model, pool, bs * (ctx + 64), 1, "triton")
    rows = [pool.alloc() for _ in range(bs)]
    assert all(r is not None and alloc.ensure(r, ctx + 8) for r in rows)
    gen = torch.Generator().manual_seed(0)
    for kv in runner.kv_pool.k_buffer + runner.kv_pool.v_buffer:  # a context to attend over
        kv.copy_(torch.randn(kv.shape, generator=gen).to(kv.dtype))
    mode = ForwardMode.TARGET_VERIFY if width > 1 else ForwardMode.DECODE
    ids = torch.randint(0, model.config.vocab_size, (width * bs,), generator=gen).tolist()
    batch = runner.make_batch(mode, ids, rows, [ctx + width] * bs, [width] * bs, stride=width,
                              logits="all" if width > 1 else "last")
    batch.attn_backend = runner.backend
    runner.backend.init_forward_metadata(batch)

    def capture(on: bool) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        with ops.use_backend("triton"), use_pdl(on):
            for _ in range(2):
                model(batch)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = model(batch).logits
        return graph, out

    g_off, out_off = capture(False)
    g_on, out_on = capture(True)
    g_off.replay()
    want = out_off.clone()
    for _ in range(30):
        g_on.replay()
    torch.cuda.synchronize()
    assert torch.equal(out_on, want)

"""The DeepSeek layer's latent rows in one kernel (``ops.latent_rows_``), on CPU under the
interpreter with the ``mla`` backend: the kernel storing the rows itself (then
``forward_stored``) gives the logits and the pool of the unfused norm + rotary + backend store,
through a prefill, decode steps and a verify block."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from updraft import ops
from updraft.batch import ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.loader import load_checkpoint
from updraft.runtime.model_runner import ModelRunner

pytest.importorskip("transformers")
needs_interpreter = pytest.mark.skipif(
    not ops.interpreting() or importlib.util.find_spec("triton") is None,
    reason="needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)",
)
REAL = ops.latent_rows_
V3 = dict(n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2, q_lora_rank=48)


def _run(folder, fused: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[torch.Tensor], torch.Tensor, int]:  # noqa: ANN001
    """Logits of a 10-token prefill, three decode steps and a 3-token verify block, the layer-0
    pool, and how often the kernel stored rows itself."""
    calls = {"stored": 0}

    def latent_rows_(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not fused:
            return False  # the unfused ops and the backend's store
        ran = REAL(*args, **kwargs)
        calls["stored"] += ran and (args[7] if len(args) > 7 else kwargs.get("pool")) is not None
        return ran

    monkeypatch.setattr(ops, "latent_rows_", latent_rows_)
    model = load_checkpoint(folder, dtype=torch.float32, device="cpu", progress=False).model
    pool = ReqToTokenPool(2, 64, "cpu")
    alloc = PagedAllocator(pool, 18, 4)
    runner = ModelRunner(model, pool, 18, 4, "mla")
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, 20)
    tokens = torch.randint(0, 256, (20,), generator=torch.Generator().manual_seed(5)).tolist()
    outs = []
    with ops.use_backend("triton"):
        outs.append(runner.forward(runner.make_batch(ForwardMode.EXTEND, tokens[:10], [row], [10], [10],
                                                     logits="all")).logits)
        for t in range(10, 13):
            outs.append(runner.forward(runner.make_batch(ForwardMode.DECODE, [tokens[t]], [row], [t + 1], [1],
                                                         stride=1)).logits)
        outs.append(runner.forward(runner.make_batch(ForwardMode.TARGET_VERIFY, tokens[13:16], [row], [16], [3],
                                                     stride=3, logits="all")).logits)
    return outs, runner.backend.kv_pool.k_buffer[0].clone(), calls["stored"]


@needs_interpreter
def test_latent_kernel_with_its_store_equals_the_unfused_path(tiny_checkpoint, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    folder = tiny_checkpoint("deepseek_v3", **V3)
    ref, ref_pool, _ = _run(folder, False, monkeypatch)
    out, pool, stored = _run(folder, True, monkeypatch)
    assert stored > 0, "the kernel never stored the rows itself"
    for a, b in zip(out, ref):
        assert (a - b).abs().max().item() <= 1e-5 * b.abs().max().item()
    assert (pool - ref_pool).abs().max().item() <= 1e-5 * ref_pool.abs().max().item()

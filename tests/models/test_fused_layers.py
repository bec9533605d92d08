"""The small-M fused decoder layer (``updraft.models.fused``) end to end, under the interpreter.

A tiny model's greedy tokens on the fused path (ops forced to "triton": 5 launches per layer,
the final norm in the LM head) equal the unfused torch path's in fp32, for a 10-token prefill and
decode steps, with the torch_native and triton attention backends and page sizes 1 and 4;
TARGET_VERIFY blocks too. Qwen2 (QKV bias) takes the whole fused path; Qwen3 (q/k norm) the
documented fallback (norm-prologue QKV GEMM, then the unfused q/k norm, rotary and store). bf16
logits stay within bf16 tolerance of the unfused path (summation orders differ).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from updraft import ops
from updraft.batch import ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.loader import load_checkpoint
from updraft.runtime.model_runner import ModelRunner

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)
pytest.importorskip("triton")

from updraft.ops import gemv  # noqa: E402

PROMPT = [5, 77, 13, 200, 9, 41, 150, 3, 88, 120]


class Calls:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """Counts the fused kernels' launches (which path actually ran)."""
    c = Calls()
    for name in ("linear", "qkv_rope_store", "gate_up_silu"):
        real = getattr(gemv, name)

        def counted(*a, _real=real, _name=name, **kw):  # noqa: ANN002, ANN003, ANN202
            c.counts[_name] = c.counts.get(_name, 0) + 1
            return _real(*a, **kw)

        monkeypatch.setattr(gemv, name, counted)
    yield c


def generate(model: torch.nn.Module, backend: str, page: int, steps: int, verify: bool = False,
             ) -> tuple[list[int], list[torch.Tensor]]:
    """Prefill PROMPT, then ``steps`` greedy decode steps (or, with ``verify``, one 4-token
    TARGET_VERIFY block of the tokens so far): (tokens, logits of every forward)."""
    pool = ReqToTokenPool(2, 64, "cpu")
    alloc = PagedAllocator(pool, 96 // page, page)
    runner = ModelRunner(model, pool, 96 // page, page, backend)
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, 40)
    out = runner.forward(runner.make_batch(ForwardMode.EXTEND, PROMPT, [row], [len(PROMPT)], [len(PROMPT)]))
    logits = [out.logits]
    toks = [int(out.logits[-1].argmax())]
    n = len(PROMPT)
    for _ in range(steps):
        n += 1
        out = runner.forward(runner.make_batch(ForwardMode.DECODE, [toks[-1]], [row], [n], [1], stride=1))
        logits.append(out.logits)
        toks.append(int(out.logits[-1].argmax()))
        if out.argmax is not None:
            assert torch.equal(out.argmax, out.logits.argmax(-1))
    if verify:
        block = toks[-4:]
        out = runner.forward(runner.make_batch(ForwardMode.TARGET_VERIFY, block, [row], [n + 3], [4], stride=4,
                                               logits="all"))
        logits.append(out.logits)
        toks += out.logits.argmax(-1).tolist()
    return toks, logits


def load(tiny_checkpoint, arch: str, dtype: torch.dtype) -> torch.nn.Module:  # noqa: ANN001
    return load_checkpoint(tiny_checkpoint(arch), dtype=dtype, device="cpu", progress=False).model


@pytest.mark.parametrize("arch,backend,page", [("llama", "torch_native", 1), ("llama", "triton", 4),
                                               ("qwen2", "torch_native", 4), ("qwen3", "triton", 1)])
def test_greedy_tokens_fused_equal_unfused_fp32(tiny_checkpoint, calls: Calls, arch: str, backend: str,
                                                page: int) -> None:
    model = load(tiny_checkpoint, arch, torch.float32)
    with ops.use_backend("torch"):
        ref_toks, ref_logits = generate(model, "torch_native", page, steps=4, verify=True)
    assert not calls.counts, "the torch path must not touch the small-M kernels"
    with ops.use_backend("triton"):
        toks, logits = generate(model, backend, page, steps=4, verify=True)
    layers = model.config.num_layers
    if arch == "qwen3":  # q/k norm: the QKV GEMM keeps its prologue, the rest is unfused
        assert "qkv_rope_store" not in calls.counts
    else:  # prefill (10 rows), 4 decode steps, 1 verify block: every forward fused
        assert calls.counts["qkv_rope_store"] == 6 * layers
    assert calls.counts["gate_up_silu"] == 6 * layers
    # o_proj and down per layer, the LM head once per forward; qwen3 adds its QKV GEMM
    assert calls.counts["linear"] == 6 * (2 * layers + 1 + (layers if arch == "qwen3" else 0))
    assert toks == ref_toks
    for a, b in zip(logits, ref_logits):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-4


def test_bf16_fused_logits_within_tolerance(tiny_checkpoint) -> None:
    model = load(tiny_checkpoint, "llama", torch.bfloat16)
    with ops.use_backend("torch"):
        _, ref = generate(model, "torch_native", 1, steps=2)
    with ops.use_backend("triton"):
        _, got = generate(model, "torch_native", 1, steps=2)
    for a, b in zip(got, ref):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 3e-2


def test_switch_turns_the_fused_path_off(tiny_checkpoint, calls: Calls) -> None:
    model = load(tiny_checkpoint, "llama", torch.float32)
    x = torch.zeros(3, 8)
    with ops.use_backend("triton"), ops.use_fused_layers(False):
        assert not ops.small_m(x)
        generate(model, "torch_native", 1, steps=1)
    assert not calls.counts
    with ops.use_backend("triton"):
        assert ops.small_m(x) and not ops.small_m(torch.zeros(17, 8)) and not ops.small_m(x.double())
    with ops.use_backend("auto"):
        assert not ops.small_m(x), "auto: CUDA only"


def test_auto_policy_where_the_h100_measured_a_gain() -> None:
    """Production ("auto"): bf16/fp16 CUDA rows, at most 8 of them (decode, a 6-token verify,
    draft steps at bs 1), up to 4096 wide (the widths the H100 measured); on by default, off with
    ``use_fused_layers(False)`` (``UPDRAFT_FUSED_LAYERS=0``). Deciding needs no GPU."""
    cuda, bf16 = torch.device("cuda"), torch.bfloat16
    with ops.use_backend("auto"):
        assert ops.fused_layers()
        if ops.triton_available():
            assert ops.small_m_rows(1, bf16, cuda, 576) and ops.small_m_rows(8, torch.float16, cuda, 2048)
            assert ops.small_m_rows(1, bf16, cuda, 4096) and ops.small_m_rows(8, bf16, cuda, 4096)
        assert not ops.small_m_rows(9, bf16, cuda, 576)
        assert not ops.small_m_rows(1, bf16, cuda, 8192)
        assert not ops.small_m_rows(1, torch.float32, cuda, 576)
        assert not ops.small_m_rows(1, bf16, torch.device("cpu"), 576)
        with ops.use_fused_layers(False):
            assert not ops.small_m_rows(1, bf16, cuda, 576)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_eagle_heads_fused_match_unfused(tiny_checkpoint, tmp_path, calls: Calls, kind: str) -> None:
    """EAGLE-1 (layer 0 without an input norm) and EAGLE-3 (``fused.eagle3_midlayer``: the QKV
    prologue gathers the embedding rows and normalises both inputs, the MLP's adds the feature)
    over a 3-token draft extend with target features."""
    from updraft.batch import CaptureHidden, FeatureKind
    from updraft.models.eagle import load_draft_head
    from updraft.testing import write_eagle3_head, write_eagle_head

    target = load(tiny_checkpoint, "llama", torch.float32)
    folder = (write_eagle_head if kind == "eagle" else write_eagle3_head)(tmp_path / kind)
    head = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    width = target.config.hidden_size * (3 if kind == "eagle3" else 1)
    feat = torch.randn(3, width, generator=torch.Generator().manual_seed(5))

    def run() -> list[torch.Tensor]:
        pool = ReqToTokenPool(2, 64, "cpu")
        alloc = PagedAllocator(pool, 64, 1)
        runner = ModelRunner(head, pool, 64, 1, "torch_native")
        row = pool.alloc()
        assert row is not None and alloc.ensure(row, 16)
        batch = runner.make_batch(ForwardMode.DRAFT_EXTEND, [4, 9, 30], [row], [3], [3], logits="all",
                                  capture_hidden=CaptureHidden.FULL, feature=feat, feature_kind=FeatureKind.TARGET)
        out = runner.forward(batch)
        return [out.logits, out.hidden]

    from updraft.models import fused

    mid = []
    real_mid = fused.eagle3_midlayer

    def counted_mid(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        mid.append(1)
        return real_mid(*a, **kw)

    with ops.use_backend("torch"):
        ref = run()
    with ops.use_backend("triton"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused, "eagle3_midlayer", counted_mid)
        got = run()
    assert calls.counts.get("qkv_rope_store") == 1 and calls.counts.get("gate_up_silu") == 1
    assert len(mid) == (kind == "eagle3")
    for a, b in zip(got, ref):
        assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-5

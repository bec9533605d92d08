"""Logit parity with Hugging Face transformers on random checkpoints: prefill + 16 decode steps,
fp32, max abs diff <= 1e-4 (Llama incl. llama3 RoPE scaling, Mistral, Qwen2, Qwen3; tied and
untied heads; GQA and MQA)."""

from __future__ import annotations

import pytest
import torch

from updraft.batch import ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.loader import load_checkpoint
from updraft.runtime.model_runner import ModelRunner

transformers = pytest.importorskip("transformers")

CASES = [
    ("llama", False, {}),
    ("llama", True, {}),
    ("llama", False, {"num_key_value_heads": 1}),  # MQA
    ("llama", False, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    ("mistral", False, {}),
    ("qwen2", False, {}),
    ("qwen2", True, {}),
    ("qwen3", False, {}),
    ("qwen3", True, {}),
]


@pytest.mark.parametrize("arch,tied,overrides", CASES, ids=lambda v: str(v) if not isinstance(v, dict) else ("-".join(v) or "base"))
@pytest.mark.parametrize("page_size", [1, 4])
def test_prefill_and_decode_logits_match_transformers(
    tiny_checkpoint, tiny_hf, arch: str, tied: bool, overrides: dict, page_size: int
) -> None:
    folder = tiny_checkpoint(arch, tied, **overrides)
    hf = tiny_hf(arch, tied, **overrides)
    prompt, steps = 12, 16
    ids = torch.randint(0, 256, (1, prompt + steps), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = hf(ids).logits[0].float()  # [L, V]

    loaded = load_checkpoint(folder, dtype=torch.float32, device="cpu", progress=False)
    pool = ReqToTokenPool(2, 64, "cpu")
    alloc = PagedAllocator(pool, 64 // page_size + 2, page_size)
    runner = ModelRunner(loaded.model, pool, 64 // page_size + 2, page_size, "torch_native")
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, prompt + steps)
    tokens = ids[0].tolist()
    out = runner.forward(runner.make_batch(ForwardMode.EXTEND, tokens[:prompt], [row], [prompt], [prompt], logits="all"))
    assert (out.logits - ref[:prompt]).abs().max().item() <= 1e-4
    for t in range(prompt, prompt + steps):
        out = runner.forward(runner.make_batch(ForwardMode.DECODE, [tokens[t]], [row], [t + 1], [1], stride=1))
        diff = (out.logits[0] - ref[t]).abs().max().item()
        assert diff <= 1e-4, f"decode step {t - prompt}: max abs diff {diff:.2e}"

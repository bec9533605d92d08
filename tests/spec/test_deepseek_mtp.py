"""DeepSeek's own MTP modules draft for it (``--speculative-algorithm MTP`` on a DeepSeek folder with
``num_nextn_predict_layers``): the modules load through ``mtp_formats`` (DeepSeek's decoder layer,
rope-part rotary, rope permutation and absorbed weights) and speculation is lossless in fp32, per
phase and through the fused iteration under the graph emulator."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from updraft.llm import LLM
from updraft.models.deepseek_mtp import random_mtp_state
from updraft.models.loader import load_checkpoint
from updraft.models.mtp import MtpHead
from updraft.sampling_params import SamplingParams

pytest.importorskip("transformers")
V3 = dict(n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2, q_lora_rank=48)


@pytest.fixture(scope="module")
def deepseek_with_mtp(tiny_checkpoint, tmp_path_factory) -> Path:  # noqa: ANN001
    src = tiny_checkpoint("deepseek_v3", **V3)
    cfg = load_checkpoint(src, dtype=torch.float32, device="cpu", progress=False).config
    assert cfg.deepseek is not None and cfg.deepseek.num_nextn_predict_layers == 1
    mtp = random_mtp_state(cfg, torch.float32, "cpu", std=0.1)[0]
    tensors = load_file(str(src / "model.safetensors")) | {f"model.layers.{cfg.num_layers}.{n}": t for n, t in mtp.items()}
    dst = tmp_path_factory.mktemp("ds-mtp")
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).write_bytes(f.read_bytes())
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


@pytest.mark.parametrize("graphs", [False, True])
def test_deepseek_mtp_lossless(deepseek_with_mtp: Path, graphs: bool) -> None:
    rng = random.Random(3)
    ps = [[rng.randrange(256) for _ in range(rng.randrange(4, 20))] for _ in range(3)]
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    plain = LLM(str(deepseek_with_mtp), device="cpu", progress=False)
    spec = LLM(str(deepseek_with_mtp), device="cpu", progress=False, graph_emulate=graphs, cuda_graph_max_bs=4,
               speculative_config={"method": "mtp", "num_speculative_tokens": 2, "adaptive": False})
    head = spec.engine.spec.proposer.runner.model  # type: ignore[union-attr]
    assert isinstance(head, MtpHead) and head.num_layers == 1
    assert type(head.layers[0].block).__name__ == "DeepseekDecoderLayer"
    ref = [o.outputs[0].token_ids for o in plain.generate(ps, greedy)]
    outs = spec.generate(ps, greedy)
    assert [o.outputs[0].token_ids for o in outs] == ref
    drafts = sum(o.metrics["spec"]["num_drafts"] for o in outs if "spec" in o.metrics)
    assert drafts >= len(ps) * 3, drafts  # the modules drafted (random weights accept little, so many verify steps)
    if graphs:
        assert spec.engine.driver is not None and spec.engine.driver.launches > 0  # the fused iteration ran

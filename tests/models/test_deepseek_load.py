"""DeepSeek checkpoints: MTP layers ignored by the target and handed to a drafter, every tensor
accounted for, the router bias kept in float32, bad configs refused in one line, the benchmark
shapes, the attention backend ``auto`` picks for a latent cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from updraft.attention import resolve_backend_name
from updraft.batch import ForwardBatch, ForwardMode
from updraft.bench.models import SHAPES, shape_config
from updraft.errors import CheckpointError
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.config import ModelConfig
from updraft.models.deepseek import DeepseekDecoderLayer, load_layer_weights
from updraft.models.deepseek_config import mtp_model_config
from updraft.models.deepseek_mtp import (
    load_mtp_state,
    mtp_checkpoint_shapes,
    random_mtp_state,
    split_mtp_state,
)
from updraft.models.layers import RotaryEmbedding
from updraft.models.llama import ModelOutput
from updraft.models.loader import load_checkpoint, model_class
from updraft.runtime.model_runner import ModelRunner

pytest.importorskip("transformers")
V3 = dict(n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2, q_lora_rank=48)


def _copy_folder(src: Path, dst: Path, tensors: dict[str, torch.Tensor], config: dict | None = None) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors":
            (dst / f.name).write_bytes(f.read_bytes())
    if config is not None:
        (dst / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_mtp_layers_load_apart(tiny_checkpoint, tmp_path: Path) -> None:  # noqa: ANN001
    src = tiny_checkpoint("deepseek_v3", **V3)
    cfg = load_checkpoint(src, dtype=torch.float32, device="cpu", progress=False).config
    assert cfg.deepseek is not None and cfg.deepseek.num_nextn_predict_layers == 1  # transformers writes 1
    mtp = random_mtp_state(cfg, torch.float32, "cpu", std=0.1)[0]
    tensors = load_file(str(src / "model.safetensors")) | {f"model.layers.{cfg.num_layers}.{n}": t for n, t in mtp.items()}
    folder = _copy_folder(src, tmp_path / "with-mtp", tensors)

    loaded = load_checkpoint(folder, dtype=torch.float32, device="cpu", progress=False)  # MTP names skipped
    assert len(loaded.model.model.layers) == cfg.num_layers
    state = load_mtp_state(folder, cfg)
    assert list(state) == [0] and set(state[0]) == set(mtp_checkpoint_shapes(cfg, 0))
    assert all(torch.equal(state[0][n], t) for n, t in mtp.items())
    own, layer_part = split_mtp_state(state[0])
    assert set(own) == {"enorm.weight", "hnorm.weight", "eh_proj.weight", "embed_tokens.weight",
                        "shared_head.norm.weight", "shared_head.head.weight"}
    mcfg = mtp_model_config(cfg)
    assert (mcfg.num_layers, mcfg.deepseek.layer_offset, mcfg.kv_bytes_per_token(torch.float32)) == (1, 3, 48 * 4)
    layer = DeepseekDecoderLayer(mcfg, 0)
    assert layer.self_attn.layer_id == 0 and hasattr(layer.mlp, "experts")  # checkpoint layer 3: MoE
    load_layer_weights(layer, layer_part.items())
    assert layer.self_attn.w_kc.shape == (4, 16, 32)  # absorbed: [heads, qk_nope, kv_lora]
    with pytest.raises(ValueError, match="missing 1 tensors: input_layernorm.weight"):
        load_layer_weights(DeepseekDecoderLayer(mcfg, 0), [(n, t) for n, t in layer_part.items() if n != "input_layernorm.weight"])
    _run_mtp_layer(mcfg, layer, own)


class _OneLayer(torch.nn.Module):
    """The smallest drafter-like model around an MTP decoder layer (no hidden-state input): its
    own KV pool of one layer through ``ModelRunner``."""

    def __init__(self, cfg: ModelConfig, layer: DeepseekDecoderLayer, own: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.config, self.layer = cfg, layer
        self.embed = torch.nn.Embedding.from_pretrained(own["embed_tokens.weight"])
        self.rotary = RotaryEmbedding(cfg.deepseek.mla.qk_rope_head_dim, 64, cfg.rope_theta, cfg.rope_scaling)
        self.rotary.build(torch.device("cpu"), torch.float32)

    def forward(self, batch: ForwardBatch) -> ModelOutput:
        x, residual = self.layer(self.embed(batch.input_ids), None, batch, self.rotary)
        return ModelOutput(logits=(x + residual)[batch.logits_indices] @ self.embed.weight.T)


def _run_mtp_layer(cfg: ModelConfig, layer: DeepseekDecoderLayer, own: dict[str, torch.Tensor]) -> None:
    pool = ReqToTokenPool(1, 16, "cpu")
    alloc = PagedAllocator(pool, 18, 1)
    runner = ModelRunner(_OneLayer(cfg, layer, own), pool, 18, 1, "torch_native")
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, 6)
    tokens = [5, 9, 2, 7, 1, 3]
    full = runner.forward(runner.make_batch(ForwardMode.EXTEND, tokens, [row], [6], [6], logits="all")).logits
    runner.forward(runner.make_batch(ForwardMode.EXTEND, tokens[:5], [row], [5], [5]))
    step = runner.forward(runner.make_batch(ForwardMode.DECODE, tokens[5:], [row], [6], [1], stride=1)).logits
    assert torch.allclose(step[0], full[5], atol=1e-5)  # the decode read the prefix from layer 0 of its pool


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda t: t.pop("model.layers.1.mlp.experts.3.up_proj.weight"), "missing 1 tensors: model.layers.1.mlp.experts.w13\\[3\\]#1"),
        (lambda t: t.pop("model.layers.2.mlp.gate.e_score_correction_bias"), "missing 1 tensors: model.layers.2.mlp.gate.e_score_correction_bias"),
        (lambda t: t.update({"model.layers.1.mlp.experts.16.up_proj.weight": torch.zeros(32, 64)}), "16 experts"),
        (lambda t: t.update({"model.layers.5.input_layernorm.weight": torch.zeros(64)}), "layer 5 is past the 3 layers and 1 MTP layers"),
        (lambda t: t.update({"model.layers.0.self_attn.q_proj.weight": torch.zeros(8, 64)}), "has no place"),
        (lambda t: t.update({"model.layers.0.self_attn.kv_b_proj.weight": torch.zeros(8, 32)}), "expected shape \\(160, 32\\)"),
    ],
    ids=["missing-expert", "missing-bias", "expert-out-of-range", "layer-out-of-range", "q_proj-with-q_lora", "bad-shape"],
)
def test_bad_checkpoints_name_the_tensor(tiny_checkpoint, tmp_path: Path, edit, message: str) -> None:  # noqa: ANN001
    src = tiny_checkpoint("deepseek_v3", **V3)
    tensors = load_file(str(src / "model.safetensors"))
    edit(tensors)
    folder = _copy_folder(src, tmp_path / "bad", tensors)
    with pytest.raises(CheckpointError, match=message) as e:
        load_checkpoint(folder, dtype=torch.float32, device="cpu", progress=False)
    assert "\n" not in str(e.value)


def test_router_bias_stays_float32(tiny_checkpoint) -> None:  # noqa: ANN001
    src = tiny_checkpoint("deepseek_v3", **V3)
    stored = load_file(str(src / "model.safetensors"))["model.layers.1.mlp.gate.e_score_correction_bias"]
    model = load_checkpoint(src, dtype=torch.bfloat16, device="cpu", progress=False).model
    gate = model.model.layers[1].mlp.gate
    assert gate.weight.dtype == torch.bfloat16 and gate.e_score_correction_bias.dtype == torch.float32
    assert torch.equal(gate.e_score_correction_bias, stored)
    assert model.model.layers[1].self_attn.w_kc.dtype == torch.bfloat16


def _hf_config(**over: object) -> dict:
    cfg = dict(SHAPES["deepseek-v3-small"]["hf_config"])
    cfg.update(over)
    return cfg


@pytest.mark.parametrize(
    "over,message",
    [
        (dict(topk_method="top_p"), "topk_method='top_p' is not supported; allowed: greedy, group_limited_greedy, noaux_tc"),
        (dict(scoring_func="relu"), "scoring_func='relu' is not supported; allowed: softmax, sigmoid"),
        (dict(n_group=7), "n_group=7 must divide n_routed_experts=256"),
        (dict(topk_group=9), "topk_group=9 must be in 1..n_group=8"),
        (dict(num_experts_per_tok=200), "num_experts_per_tok=200 must be in 1..128"),
        (dict(rope_scaling={"type": "llama3", "factor": 8.0}), "rope type='llama3' is not supported; allowed: default, yarn"),
        (dict(quantization_config={"quant_method": "fp8"}), "quantization_config.quant_method='fp8' is not supported"),
        (dict(hidden_act="gelu"), "hidden_act='gelu' is not supported; allowed: silu"),
        (dict(qk_rope_head_dim=63), "qk_rope_head_dim=63 must be even"),
    ],
)
def test_bad_configs_raise_one_line(over: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(")", "\\)").replace(".", "\\.")):
        ModelConfig.from_hf(_hf_config(**over))
    (tmp_path / "config.json").write_text(json.dumps(_hf_config(**over)))
    with pytest.raises(CheckpointError) as e:  # through the loader: "<file>: invalid model config (...)"
        load_checkpoint(tmp_path, dtype=torch.float32, device="cpu", progress=False)
    assert "\n" not in str(e.value) and message.split(" ")[0] in str(e.value)


def test_benchmark_shapes() -> None:
    """The random shapes parse, and their size is what the docstring says (meta, no memory)."""
    for shape, target_gb, mtp_gb, dtype_name in (("deepseek-v2-lite", 31.4, 2.0, "DeepseekV2ForCausalLM"),
                                                  ("deepseek-v3-small", 27.9, 26.9, "DeepseekV3ForCausalLM")):
        cfg, _ = shape_config(shape)
        with torch.device("meta"):
            model = model_class(cfg)(cfg)
        assert type(model).__name__ == dtype_name
        assert sum(p.numel() for p in model.parameters()) * 2 / 1e9 == pytest.approx(target_gb, abs=0.1)
        mtp = sum(torch.Size(s).numel() for s in mtp_checkpoint_shapes(cfg, 0).values())
        assert mtp * 2 / 1e9 == pytest.approx(mtp_gb, abs=0.1)
    lite, _ = shape_config("deepseek-v2-lite")
    assert (lite.head_dim, lite.v_head_dim, lite.num_kv_heads, lite.shared_kv) == (576, 512, 1, True)
    assert lite.attn_scale == pytest.approx(192**-0.5 * (0.1 * 0.707 * torch.log(torch.tensor(40.0)).item() + 1) ** 2)


def test_auto_backend_for_latent_caches() -> None:
    cuda = torch.device("cuda")
    assert resolve_backend_name("auto", cuda) == "triton"
    assert resolve_backend_name("auto", cuda, needs_v_layouts=True) == "mla"
    assert resolve_backend_name("auto", torch.device("cpu"), needs_v_layouts=True) == "torch_native"


def test_a_tensor_twice_is_refused(tiny_checkpoint) -> None:  # noqa: ANN001
    src = tiny_checkpoint("deepseek_v3", **V3)
    model = load_checkpoint(src, dtype=torch.float32, device="cpu", progress=False).model
    tensors = list(load_file(str(src / "model.safetensors")).items())
    twice = tensors + [t for t in tensors if t[0] == "model.layers.1.mlp.experts.0.gate_proj.weight"]
    with pytest.raises(ValueError, match="'model.layers.1.mlp.experts.0.gate_proj.weight' appears twice"):
        model.load_weights(twice)


def test_random_deepseek_benchmark(tmp_path: Path) -> None:
    """``random:deepseek-*`` goes through the benchmark (CPU-sized layout), and its MTP layer's
    random weights fill a drafter's layer."""
    from updraft.cli import main

    out = tmp_path / "bench"
    assert main(["bench", "--model", "random:deepseek-tiny", "--device", "cpu", "--no-progress", "--num-prompts", "2",
                 "--input-len", "12", "--output-len", "6", "--batch-sizes", "1,2", "--out", str(out)]) == 0
    assert json.loads((out / "bench.json").read_text())["runs"]["plain"]["2"]["requests"] == 2
    cfg, _ = shape_config("deepseek-tiny")
    own, part = split_mtp_state(random_mtp_state(cfg, torch.float32, "cpu")[0])
    load_layer_weights(DeepseekDecoderLayer(mtp_model_config(cfg), 0), part.items())
    assert own["eh_proj.weight"].shape == (64, 128)

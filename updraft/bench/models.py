"""Random-weight models at real shapes, built on the device for benchmarks (no checkpoint to
stage): ``random:llama3-8b`` (Llama-3.1-8B), ``random:qwen3-8b`` (Qwen3-8B-like),
``random:smollm2-135m`` (SmolLM2-135M's shape), ``random:deepseek-v2-lite`` and
``random:deepseek-v3-small``.

DeepSeek shapes are Hugging Face ``config.json`` dicts parsed like a checkpoint's:

* ``deepseek-v2-lite``: DeepSeek-V2-Lite's published config.json (deepseek-ai/DeepSeek-V2-Lite on
  the Hub, as remembered: 27 layers, hidden 2048, 16 heads, no q_lora, kv_lora 512, qk_nope 128,
  qk_rope 64, v_head 128, 64 routed experts of 1408 with 6 per token and 2 shared, dense layer 0
  of 10944, softmax greedy routing, yarn factor 40 over 4096 positions, vocab 102400), plus one
  MTP layer (``num_nextn_predict_layers=1``, which V2-Lite does not have) so an MTP cycle can be
  measured; ``random_mtp_state`` makes its weights. About 31 GB in bf16 (+2 GB MTP).
* ``deepseek-v3-small``: DeepSeek-V3's per-layer shapes (hidden 7168, 128 heads, q_lora 1536,
  kv_lora 512, dense layer of 18432, 256 experts of 2048 with 8 per token and 1 shared, sigmoid
  noaux_tc routing over 8 groups, top 4 groups, routed_scaling_factor 2.5, vocab 129280, yarn
  factor 40) but 2 layers instead of 61 (layer 0 dense, layer 1 MoE; V3 has 3 dense layers),
  all 256 experts kept, one MTP layer: 28 GB in bf16 for the target, +27 GB for the MTP layer
  (23 GB when it shares the target's embedding and head), leaving an 80 GB GPU room for a KV
  cache (1152 bytes per token and layer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from updraft.models.config import ModelConfig, RopeScaling
from updraft.models.loader import LoadedModel, model_class

_DEEPSEEK_YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}
DEEPSEEK_V2_LITE: dict[str, Any] = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 2048,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64, "num_experts_per_tok": 6,
    "routed_scaling_factor": 1.0, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "topk_method": "greedy", "n_group": 1, "topk_group": 1, "scoring_func": "softmax",
    "norm_topk_prob": False, "first_k_dense_replace": 1, "moe_layer_freq": 1, "hidden_act": "silu",
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "rope_scaling": {**_DEEPSEEK_YARN, "mscale": 0.707, "mscale_all_dim": 0.707},
    "attention_bias": False, "tie_word_embeddings": False, "bos_token_id": 100000, "eos_token_id": 100001,
    "num_nextn_predict_layers": 1,  # added: V2-Lite has no MTP layer
}
DEEPSEEK_V3_SMALL: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "scoring_func": "sigmoid",
    "norm_topk_prob": True, "first_k_dense_replace": 1, "moe_layer_freq": 1, "hidden_act": "silu",
    "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "rope_scaling": {**_DEEPSEEK_YARN, "mscale": 1.0, "mscale_all_dim": 1.0},
    "attention_bias": False, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1,
    "num_nextn_predict_layers": 1,
}

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": dict(  # for tests of the benchmark machinery; larger weights keep argmax tie-free
        family="llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, max_position_embeddings=512, init_std=0.2,
    ),
    "smollm2-135m": dict(  # SmolLM2-135M's shape (host-work profiles need no checkpoint)
        family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
        num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5, rope_theta=100000.0, max_position_embeddings=8192,
        tie_word_embeddings=True, eos_token_ids=(2,),
    ),
    "llama3-8b": dict(
        family="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32,
        num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192), max_position_embeddings=8192, eos_token_ids=(128001,),
    ),
    "qwen3-8b": dict(
        family="qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_layers=36, num_heads=32,
        num_kv_heads=8, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0, qk_norm=True,
        max_position_embeddings=8192, eos_token_ids=(151645,), architecture="Qwen3ForCausalLM",
    ),
    "deepseek-tiny": dict(  # tests of the benchmark machinery on a DeepSeek-V3 layout (CPU-sized)
        hf_config={**DEEPSEEK_V3_SMALL, "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
                   "moe_intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 16,
                   "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2, "q_lora_rank": 48, "kv_lora_rank": 32,
                   "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 24, "num_hidden_layers": 3,
                   "max_position_embeddings": 512},
        init_std=0.2,
    ),
    "deepseek-v2-lite": dict(hf_config=DEEPSEEK_V2_LITE),
    "deepseek-v3-small": dict(hf_config=DEEPSEEK_V3_SMALL),
}


class StubTokenizer:
    """Enough tokenizer for an engine fed token ids (random models have no vocabulary)."""

    eos_token_ids: set[int] = set()
    bos_token_id = None
    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) % 1000 + 1 for c in text]

    def encode_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        return self.encode(" ".join(m["content"] for m in messages))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def is_random(name: str) -> bool:
    return name.startswith("random:")


def shape_config(shape: str) -> tuple[ModelConfig, float]:
    """The ``ModelConfig`` of a known shape and its weights' init std."""
    spec = dict(SHAPES[shape])
    std = float(spec.pop("init_std", 0.02))
    if "hf_config" in spec:
        return ModelConfig.from_hf(spec["hf_config"]), std
    return ModelConfig(**spec), std


def random_model(name: str, dtype: torch.dtype, device: torch.device | str) -> LoadedModel:
    """``random:<shape>`` with N(0, 0.02) weights (norm weights 1), built straight on ``device``.
    Speed is what such a model measures; with realistic 0.02 weights its logits are nearly flat,
    so greedy agreement with a peer is dominated by near-ties."""
    shape = name.removeprefix("random:")
    if shape not in SHAPES:
        raise ValueError(f"unknown random model {name!r}; choose random:{', random:'.join(SHAPES)}")
    cfg, std = shape_config(shape)
    with torch.device("meta"):
        model = model_class(cfg)(cfg)
    model = model.to(dtype=dtype).to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, std, generator=gen)
            else:
                p.fill_(1.0)
    model.post_load(cfg.max_position_embeddings)
    model.eval()
    return LoadedModel(model=model, config=cfg, tokenizer=StubTokenizer(), source=Path(name), hf_config={})  # type: ignore[arg-type]

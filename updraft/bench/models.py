"""Random-weight models at real shapes, built on the device for benchmarks (no checkpoint to
stage): ``random:llama3-8b`` (Llama-3.1-8B), ``random:qwen3-8b`` (Qwen3-8B-like) and
``random:smollm2-135m`` (SmolLM2-135M's shape)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from updraft.models.config import ModelConfig, RopeScaling
from updraft.models.llama import LlamaForCausalLM
from updraft.models.loader import LoadedModel

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


def random_model(name: str, dtype: torch.dtype, device: torch.device | str) -> LoadedModel:
    """``random:<shape>`` with N(0, 0.02) weights (norm weights 1), built straight on ``device``.
    Speed is what such a model measures; with realistic 0.02 weights its logits are nearly flat,
    so greedy agreement with a peer is dominated by near-ties."""
    shape = name.removeprefix("random:")
    if shape not in SHAPES:
        raise ValueError(f"unknown random model {name!r}; choose random:{', random:'.join(SHAPES)}")
    spec = dict(SHAPES[shape])
    std = float(spec.pop("init_std", 0.02))
    cfg = ModelConfig(**spec)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
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

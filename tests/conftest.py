"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Without a GPU the Triton kernels can only run under the interpreter, and the switch is read when
# a kernel is defined: set it before any test module imports them (collection order would
# otherwise decide). On a CUDA machine it must stay unset (it would interpret every kernel).
try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The default model's GGUF (SmolLM2-135M-Instruct Q4_1), downloaded into the updraft cache
    on first use (``$UPDRAFT_CACHE`` or ``~/.cache/updraft``)."""
    from updraft.models.resolve import resolve_model

    return resolve_model("default")


# ---- tiny random checkpoints (transformers writes them, so the layout is the real one) --------
TINY_VOCAB = 300


def write_tiny_tokenizer(folder: Path) -> None:
    """A byte-level tokenizer (no merges) with ChatML specials, as tokenizer.json + config."""
    import json

    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as RustTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = RustTokenizer(models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<s>", "</s>", "<|im_end|>")])
    tok.save(str(folder / "tokenizer.json"))
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "chat_template": template})
    )


def tiny_hf_model(arch: str = "llama", tied: bool = False, seed: int = 0, **overrides: object):  # noqa: ANN201
    """A small random transformers model of the given family (weights ~ N(0, 0.02) * scale)."""
    import torch
    import transformers

    common: dict[str, object] = dict(
        vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=tied, bos_token_id=256, eos_token_id=257,
    )
    classes = {
        "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig, {}),
        "mistral": (transformers.MistralForCausalLM, transformers.MistralConfig, {"sliding_window": None}),
        "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config, {}),
        "qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config, {"head_dim": 32}),
    }
    model_cls, config_cls, extra = classes[arch]
    common.update(extra)
    common.update(overrides)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**common))
    with torch.no_grad():  # larger weights than the default init: peaked, tie-free logits
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    return model.eval()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """Factory: ``tiny_checkpoint(arch="llama", tied=False, **config) -> Path`` of a saved HF folder
    (safetensors + tokenizer). Cached per argument set for the session."""
    cache: dict[str, Path] = {}

    def make(arch: str = "llama", tied: bool = False, seed: int = 0, **overrides: object) -> Path:
        key = f"{arch}-{tied}-{seed}-{sorted(overrides.items())}"
        if key not in cache:
            folder = tmp_path_factory.mktemp(f"tiny-{arch}")
            tiny_hf_model(arch, tied, seed, **overrides).save_pretrained(folder)
            write_tiny_tokenizer(folder)
            cache[key] = folder
        return cache[key]

    return make


@pytest.fixture(scope="session")
def tiny_hf():  # noqa: ANN201
    """The transformers model behind ``tiny_checkpoint`` (same arguments, same weights)."""
    return tiny_hf_model

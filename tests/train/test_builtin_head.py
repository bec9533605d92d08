"""The head shipped in the package (``builtin:smollm2``): present, small, in the published
layout for SmolLM2-135M-Instruct, resolved wherever a draft path goes, and lossless with the
default model (fp32 CPU)."""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from updraft.errors import ModelNotFoundError, UpdraftError
from updraft.heads import BUILTIN_HEADS, builtin_head_path, resolve_draft_path
from updraft.llm import LLM
from updraft.models.eagle import DraftHeadConfig
from updraft.sampling_params import SamplingParams


def test_shipped_head_files() -> None:
    folder = builtin_head_path("smollm2")
    assert folder.name == BUILTIN_HEADS["smollm2"][0]
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and BUILTIN_HEADS["smollm2"][1] == "eagle3"
    assert (cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (576, 49152, 9, 3)
    assert cfg["draft_vocab_size"] == 8192 and cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, 26]
    # the context tokens' calibration fitted for this head (benchmarks/context_calibration.py) loads as such
    assert DraftHeadConfig.from_hf(cfg).context_bias == cfg["updraft_context_vocab"]["bias"] == 3.5
    weights = folder / "model.safetensors"
    assert weights.stat().st_size < 24 * 2**20  # the device runs carry the tree: keep it small
    with safe_open(str(weights), framework="pt") as f:
        keys = set(f.keys())
        assert "embed_tokens.weight" not in keys and {"fc.weight", "lm_head.weight", "d2t", "t2d"} <= keys
        assert any(k.startswith("midlayer.") for k in keys)
        assert f.get_slice("lm_head.weight").get_shape() == [8192, 576]
        assert all(f.get_slice(k).get_dtype() == "BF16" for k in keys if k not in ("d2t", "t2d"))
    assert (folder / "README.md").is_file()


def test_resolution_and_errors(tiny_checkpoint) -> None:  # noqa: ANN001
    assert resolve_draft_path("builtin:smollm2") == str(builtin_head_path("smollm2"))
    assert resolve_draft_path("/some/folder") == "/some/folder"
    with pytest.raises(ModelNotFoundError, match="unknown builtin draft head 'nope': available builtin:smollm2"):
        resolve_draft_path("builtin:nope")
    # Through the engine: the SmolLM2 head refuses a target of another width, in one line.
    with pytest.raises(UpdraftError) as exc:
        LLM(str(tiny_checkpoint("llama")), device="cpu", progress=False,
            speculative_config={"method": "eagle3", "model": "builtin:smollm2"})
    assert "hidden size 576" in str(exc.value) and "\n" not in str(exc.value)


def test_builtin_head_is_lossless_on_the_default_model(smollm2_gguf) -> None:  # noqa: ANN001
    import torch

    from updraft.config import EngineConfig, SpeculativeConfig
    from updraft.engine.engine import Engine
    from updraft.models.loader import load_checkpoint

    loaded = load_checkpoint(smollm2_gguf, dtype=torch.float32, device="cpu", progress=False)  # once, for both engines
    common = dict(model=str(smollm2_gguf), device="cpu", progress=False, max_total_tokens=4096)
    chats = [[{"role": "user", "content": "Explain what a hash table is."}], [{"role": "user", "content": "List three uses of copper."}]]
    params = SamplingParams(temperature=0.0, max_tokens=24)
    plain = LLM(engine=Engine(EngineConfig(**common), loaded=loaded))
    want = [o.outputs[0].token_ids for o in plain.chat(chats, params)]
    spec_cfg = SpeculativeConfig(method="eagle3", draft_model="builtin:smollm2", num_steps=5, adaptive=False)
    spec = LLM(engine=Engine(EngineConfig(**common, speculative=spec_cfg), loaded=loaded))
    outs = spec.chat(chats, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert all(o.metrics["spec"]["num_drafts"] > 0 for o in outs)

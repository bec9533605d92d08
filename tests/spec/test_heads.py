"""EAGLE / EAGLE-3 heads load from HF-format folders in the published key layout; mismatches
with the target give one-line errors naming the sizes."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from updraft.errors import CheckpointError, ModelNotFoundError
from updraft.models.eagle import Eagle3Head, EagleHead, load_draft_head
from updraft.models.loader import load_checkpoint
from updraft.testing import write_eagle3_head, write_eagle_head


@pytest.fixture(scope="module")
def target(tiny_checkpoint):  # noqa: ANN001, ANN201
    return load_checkpoint(tiny_checkpoint("llama"), dtype=torch.float32, device="cpu", progress=False).model


def test_eagle_head_loads_and_shares_target_weights(tmp_path, target) -> None:  # noqa: ANN001
    folder = write_eagle_head(tmp_path / "e")
    head = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert isinstance(head, EagleHead)
    sd = load_file(str(folder / "model.safetensors"))
    assert torch.equal(head.fc.weight, sd["fc.weight"])
    q, k, v = (sd[f"layers.0.self_attn.{n}_proj.weight"] for n in "qkv")
    assert torch.equal(head.layers[0].self_attn.qkv_proj.weight, torch.cat([q, k, v]))
    assert head.shared.lm_head_weight() is target.lm_head_weight  # shared, not copied
    assert isinstance(head.layers[0].input_layernorm, torch.nn.Identity)


def test_eagle3_head_maps_draft_vocab(tmp_path, target) -> None:  # noqa: ANN001
    folder = write_eagle3_head(tmp_path / "e3", draft_vocab=120)
    head = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert isinstance(head, Eagle3Head)
    sd = load_file(str(folder / "model.safetensors"))
    ids = torch.arange(120)
    assert torch.equal(head.to_target_ids(ids), ids + sd["d2t"])
    assert sd["t2d"][head.to_target_ids(ids)].all()  # every mapped id is in the draft set
    assert head.lm_head.weight.shape == (120, target.config.hidden_size)


def test_model_prefix_in_keys_is_accepted(tmp_path, target) -> None:  # noqa: ANN001
    folder = write_eagle_head(tmp_path / "p")
    sd = load_file(str(folder / "model.safetensors"))
    save_file({f"model.{k}": v for k, v in sd.items()}, str(folder / "model.safetensors"))
    assert isinstance(load_draft_head(folder, target, torch.float32, torch.device("cpu")), EagleHead)


@pytest.mark.parametrize(
    "writer,change,needle",
    [
        (write_eagle_head, {"hidden_size": 32}, "hidden"),
        (write_eagle_head, {"vocab_size": 500}, "vocabulary is 500"),
        (write_eagle3_head, {"target_hidden_size": 96}, "target hidden size 96"),
        (write_eagle3_head, {"vocab_size": 256}, "vocabulary is 256"),
    ],
)
def test_mismatches_are_clear(tmp_path, target, writer, change: dict, needle: str) -> None:  # noqa: ANN001
    folder = writer(tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(change)
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as exc:
        load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_missing_and_unexpected_tensors(tmp_path, target) -> None:  # noqa: ANN001
    folder = write_eagle_head(tmp_path / "x")
    sd = load_file(str(folder / "model.safetensors"))
    del sd["layers.0.mlp.down_proj.weight"]
    save_file(sd, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="missing 1 tensors"):
        load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    with pytest.raises(ModelNotFoundError):
        load_draft_head(tmp_path / "nowhere", target, torch.float32, torch.device("cpu"))
    (tmp_path / "arch").mkdir()
    (tmp_path / "arch" / "config.json").write_text(json.dumps({"architectures": ["MedusaModel"]}))
    with pytest.raises(CheckpointError, match="MedusaModel"):
        load_draft_head(tmp_path / "arch", target, torch.float32, torch.device("cpu"))


def test_draft_lm_head_choice_flags_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """``draft_lm_head``: model never quantizes, auto only on a capable GPU for a large head (never
    on the CPU), fp8 needs compute capability >= 8.9 (or the interpreter) and says so in one line;
    the flag and the JSON key reach the config."""
    from updraft.cli import build_parser, engine_config_from_args
    from updraft.config import ConfigError, SpeculativeConfig, parse_speculative_config
    from updraft.spec import setup

    w = torch.zeros(64, 32)
    assert not setup.fp8_lm_head("model", w) and not setup.fp8_lm_head("auto", w)
    assert setup.fp8_lm_head("fp8", w) == setup.ops.interpreting()
    monkeypatch.setattr(setup.ops, "interpreting", lambda: False)
    with pytest.raises(ConfigError, match="compute capability >= 8.9") as exc:
        setup.fp8_lm_head("fp8", w)
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="draft_lm_head='int4' is invalid"):
        SpeculativeConfig(method="eagle3", draft_model="x", draft_lm_head="int4").validate()
    cfg = parse_speculative_config({"method": "eagle3", "model": "x", "draft_lm_head": "model"})
    assert cfg is not None and cfg.draft_lm_head == "model"
    args = build_parser().parse_args(["generate", "--prompt", "hi", "--speculative-algorithm", "EAGLE3",
                                      "--speculative-draft-model-path", "x", "--speculative-draft-lm-head", "fp8"])
    spec = engine_config_from_args(args).speculative
    assert spec is not None and spec.draft_lm_head == "fp8"
    assert SpeculativeConfig(method="eagle3", draft_model="x").draft_lm_head == "auto"

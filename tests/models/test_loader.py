"""load_checkpoint on Hugging Face folders written by transformers, and its error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from updraft.errors import CheckpointError, ModelNotFoundError, UpdraftError
from updraft.models.llama import LlamaForCausalLM
from updraft.models.loader import LoadedModel, load_checkpoint
from updraft.testing import tiny_hf_model, write_tiny_tokenizer

transformers = pytest.importorskip("transformers")

VOCAB = 300


def write_tokenizer(folder: Path) -> None:
    write_tiny_tokenizer(folder)


def tiny_model(arch: str, tied: bool) -> transformers.PreTrainedModel:
    return tiny_hf_model(arch, tied, max_position_embeddings=128)


def save(model: transformers.PreTrainedModel, folder: Path, shard: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **kwargs)
    write_tokenizer(folder)
    return folder


def unfused_state_dict(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """Our parameters under Hugging Face names, fused q/k/v and gate/up split back apart."""
    cfg = model.config
    out: dict[str, torch.Tensor] = {}
    for name, p in model.state_dict().items():
        if name.endswith("rotary.cos_sin"):
            continue
        if ".qkv_proj." in name:
            for part, t in zip("qkv", p.split([cfg.q_size, cfg.kv_size, cfg.kv_size]), strict=True):
                out[name.replace("qkv_proj", f"{part}_proj")] = t
        elif ".gate_up_proj." in name:
            gate, up = p.chunk(2)
            out[name.replace("gate_up_proj", "gate_proj")] = gate
            out[name.replace("gate_up_proj", "up_proj")] = up
        else:
            out[name] = p
    return out


@pytest.mark.parametrize(
    "arch,tied,shard",
    [
        ("llama", False, None),
        ("llama", True, "60KB"),
        ("mistral", False, None),
        ("qwen2", True, None),
        ("qwen2", False, "40KB"),
        ("qwen3", False, None),
    ],
)
def test_hf_folder_round_trip(tmp_path: Path, arch: str, tied: bool, shard: str | None) -> None:
    model = tiny_model(arch, tied)
    folder = save(model, tmp_path / arch, shard)
    if shard:
        assert (folder / "model.safetensors.index.json").is_file()
        assert len(list(folder.glob("*.safetensors"))) > 1

    loaded = load_checkpoint(folder, dtype=torch.float32, device="cpu", progress=False)
    assert isinstance(loaded, LoadedModel) and loaded.source == folder
    assert loaded.config.family == arch and loaded.config.tie_word_embeddings is tied
    assert loaded.hf_config["model_type"] == arch
    ours = unfused_state_dict(loaded.model)
    ref = model.state_dict()
    if tied:
        ref.pop("lm_head.weight", None)
    assert set(ours) == set(ref)
    for name, t in ref.items():
        assert torch.equal(ours[name], t), name
    assert not loaded.model.training
    assert loaded.model.rotary.cos_sin.shape == (128, 64 // 4 if arch != "qwen3" else 32)

    tok = loaded.tokenizer
    assert tok.encode("hi") == [256, tok.token_to_id("h"), tok.token_to_id("i")]
    assert 257 in tok.eos_token_ids and tok.token_to_id("<|im_end|>") in tok.eos_token_ids


def test_dtype_and_max_positions(tmp_path: Path) -> None:
    model = tiny_model("qwen2", tied=False)
    folder = save(model, tmp_path / "m")
    loaded = load_checkpoint(folder, dtype=torch.bfloat16, device="cpu", max_positions=32, progress=False)
    params = dict(loaded.model.named_parameters())
    assert {p.dtype for p in params.values()} == {torch.bfloat16}
    assert torch.equal(params["lm_head.weight"], model.lm_head.weight.to(torch.bfloat16))
    assert loaded.model.rotary.cos_sin.shape[0] == 32


def test_progress_bar_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The loading bar draws on stderr where bars draw (a terminal; here forced), never when the
    caller turns it off, and not into a log (pytest's captured stderr is not a terminal)."""
    folder = save(tiny_model("llama", tied=True), tmp_path / "m")
    monkeypatch.setenv("UPDRAFT_PROGRESS", "1")
    load_checkpoint(folder, dtype=torch.float32, device="cpu", progress=True)
    captured = capsys.readouterr()
    assert "Loading weights" in captured.err and captured.out == ""
    load_checkpoint(folder, dtype=torch.float32, device="cpu", progress=False)
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("UPDRAFT_PROGRESS")
    load_checkpoint(folder, dtype=torch.float32, device="cpu", progress=True)
    assert capsys.readouterr().err == ""


# ---- errors --------------------------------------------------------------------------------
def _load_error(path: Path, cls: type[UpdraftError] = CheckpointError) -> str:
    with pytest.raises(cls) as e:
        load_checkpoint(path, dtype=torch.float32, device="cpu", progress=False)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


@pytest.fixture
def good_folder(tmp_path: Path) -> Path:
    return save(tiny_model("llama", tied=False), tmp_path / "good")


@pytest.fixture
def sharded_folder(tmp_path: Path) -> Path:
    return save(tiny_model("llama", tied=False), tmp_path / "sharded", shard="60KB")


def test_missing_config(good_folder: Path) -> None:
    (good_folder / "config.json").unlink()
    assert "config.json" in _load_error(good_folder)


def test_no_safetensors(good_folder: Path) -> None:
    (good_folder / "model.safetensors").unlink()
    msg = _load_error(good_folder)
    assert "model.safetensors" in msg and str(good_folder) in msg


def test_index_names_missing_shard(sharded_folder: Path) -> None:
    shard = sorted(sharded_folder.glob("model-*.safetensors"))[-1]
    shard.unlink()
    msg = _load_error(sharded_folder)
    assert "model.safetensors.index.json" in msg and shard.name in msg


def test_truncated_safetensors(good_folder: Path) -> None:
    f = good_folder / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    msg = _load_error(good_folder)
    assert "model.safetensors" in msg and "truncated" in msg


def test_garbage_safetensors(good_folder: Path) -> None:
    (good_folder / "model.safetensors").write_bytes(b"\xff" * 64)
    assert "model.safetensors" in _load_error(good_folder)


def test_unsupported_architecture(good_folder: Path) -> None:
    cfg = json.loads((good_folder / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    cfg["model_type"] = "gpt2"
    (good_folder / "config.json").write_text(json.dumps(cfg))
    msg = _load_error(good_folder)
    assert "config.json" in msg and "GPT2LMHeadModel" in msg and "LlamaForCausalLM" in msg


def test_shape_mismatch_names_file(sharded_folder: Path) -> None:
    cfg = json.loads((sharded_folder / "config.json").read_text())
    cfg["intermediate_size"] = 128
    (sharded_folder / "config.json").write_text(json.dumps(cfg))
    msg = _load_error(sharded_folder)
    assert ".safetensors" in msg and "mlp" in msg


def test_missing_tensor(good_folder: Path) -> None:
    f = good_folder / "model.safetensors"
    tensors = load_file(f)
    del tensors["model.layers.1.post_attention_layernorm.weight"]
    save_file(tensors, f, metadata={"format": "pt"})
    msg = _load_error(good_folder)
    assert "missing" in msg and "post_attention_layernorm" in msg and str(good_folder) in msg


def test_nonexistent_path(tmp_path: Path) -> None:
    assert "nope" in _load_error(tmp_path / "nope", ModelNotFoundError)
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    assert "weights.bin" in _load_error(other, ModelNotFoundError)

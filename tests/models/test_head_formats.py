"""Draft heads saved by other engines' trainers load, and ours load in theirs.

Each case writes a head built here (``new_head``, weights moved off their init) the way another
trainer saves it: SpecForge / SGLang EAGLE-3 (``midlayer.*``, q/k/v apart, ``embed_tokens``
copy, ``d2t`` + ``t2d``), vLLM's naming (``layers.0.*``, stacked ``qkv_proj`` /
``gate_up_proj``, no ``t2d``), EAGLE-3 over the full vocabulary without ``d2t`` / ``lm_head``,
the original EAGLE-1 heads (``LlamaForCausalLM`` in config, ``pytorch_model.bin``, no ``bias``
field, ``embed_tokens``), an EAGLE-1 head without ``fc.bias``, ``model.``-prefixed keys. The
loaded head must hold the same tensors and give the same logits (fp32) as the head built here.

The export side checks ``save_head``'s names against the name rules of SGLang's and vLLM's
loaders (as they read them: prefixes, ``midlayer`` -> ``layers.0``, q/k/v stacking, ``d2t`` /
``t2d`` handling): every saved tensor lands on one of their parameters (both loaders skip
unknown names silently, so a wrong name would go unnoticed there) and every parameter they do
not share with the target is covered."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from updraft.llm import LLM
from updraft.models.eagle import Eagle3Head, EagleHead, load_draft_head
from updraft.models.loader import load_checkpoint
from updraft.sampling_params import SamplingParams
from updraft.train.forward import head_logits, unroll
from updraft.train.heads import Head, new_head, published_state_dict, save_head, vocab_maps


@pytest.fixture(scope="module")
def target(tiny_checkpoint):  # noqa: ANN001, ANN201
    return load_checkpoint(tiny_checkpoint("llama"), dtype=torch.float32, device="cpu", progress=False).model


def built(method: str, target, *, draft: torch.Tensor | None = None, fc_bias: bool = True, keep_lm_head: bool = False) -> tuple[Head, dict]:  # noqa: ANN001
    head, cfg = new_head(method, target, draft_ids=draft, aux_layers=(0, 1, 1) if method == "eagle3" else None, seed=2)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if not (keep_lm_head and name == "lm_head.weight"):
                p.add_(0.05 * torch.randn(p.shape, generator=g))
        if not fc_bias:
            head.fc.bias.zero_()
    return head, cfg


def stack(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """q/k/v and gate/up stacked, as a state dict dumped from an inference engine."""
    out = dict(sd)
    for prefix in {k.rsplit(".", 2)[0] for k in sd if k.endswith("q_proj.weight")}:
        out[f"{prefix}.qkv_proj.weight"] = torch.cat([out.pop(f"{prefix}.{n}_proj.weight") for n in "qkv"])
    for prefix in {k.rsplit(".", 2)[0] for k in sd if k.endswith("gate_proj.weight")}:
        out[f"{prefix}.gate_up_proj.weight"] = torch.cat([out.pop(f"{prefix}.{n}_proj.weight") for n in ("gate", "up")])
    return out


def write(folder: Path, cfg: dict, sd: dict[str, torch.Tensor], bin_file: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    sd = {k: v.detach().contiguous() for k, v in sd.items()}
    if bin_file:
        torch.save(sd, folder / "pytorch_model.bin")
    else:
        save_file(sd, str(folder / "model.safetensors"))
    return folder


def case_specforge_eagle3(tmp: Path, target) -> tuple[Head, Path]:  # noqa: ANN001
    draft = torch.arange(1, target.config.vocab_size, 2)
    head, cfg = built("eagle3", target, draft=draft)
    sd = published_state_dict(head)
    sd["d2t"], sd["t2d"] = vocab_maps(draft, target.config.vocab_size)
    sd["embed_tokens.weight"] = target.model.embed_tokens.weight  # SpecForge saves its (frozen) copy
    cfg.pop("eagle_config")
    cfg.pop("target_hidden_size")
    return head, write(tmp, dict(cfg, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 1]}), sd)


def case_vllm_layers0_stacked(tmp: Path, target) -> tuple[Head, Path]:  # noqa: ANN001
    draft = torch.arange(0, target.config.vocab_size, 3)
    head, cfg = built("eagle3", target, draft=draft)
    sd = {k.replace("midlayer.", "layers.0."): v for k, v in stack(published_state_dict(head)).items()}
    sd["d2t"] = vocab_maps(draft, target.config.vocab_size)[0]
    return head, write(tmp, dict(cfg, architectures=["Eagle3LlamaForCausalLM"]), sd)


def case_eagle3_full_vocab_shared_lm_head(tmp: Path, target) -> tuple[Head, Path]:  # noqa: ANN001
    head, cfg = built("eagle3", target, keep_lm_head=True)  # lm_head = the target's (new_head's init)
    sd = {k: v for k, v in published_state_dict(head).items() if k not in ("lm_head.weight", "d2t")}
    cfg.pop("draft_vocab_size")
    return head, write(tmp, cfg, sd)


def case_eagle3_plain_arch_bin(tmp: Path, target) -> tuple[Head, Path]:  # noqa: ANN001
    draft = torch.arange(5, target.config.vocab_size)
    head, cfg = built("eagle3", target, draft=draft)
    sd = published_state_dict(head)
    sd["d2t"], sd["t2d"] = vocab_maps(draft, target.config.vocab_size)
    return head, write(tmp, dict(cfg, architectures=["LlamaForCausalLM"]), sd, bin_file=True)


def case_original_eagle1(tmp: Path, target) -> tuple[Head, Path]:  # noqa: ANN001
    head, cfg = built("eagle", target)
    sd = published_state_dict(head)
    sd["embed_tokens.weight"] = target.model.embed_tokens.weight
    cfg = {k: v for k, v in cfg.items() if k not in ("bias", "target_hidden_size")}
    return head, write(tmp, dict(cfg, architectures=["LlamaForCausalLM"]), sd, bin_file=True)


def case_eagle1_without_fc_bias(tmp: Path, target) -> tuple[Head, Path]:  # noqa: ANN001
    head, cfg = built("eagle", target, fc_bias=False)
    sd = {k: v for k, v in published_state_dict(head).items() if k != "fc.bias"}
    cfg.pop("bias")
    return head, write(tmp, cfg, sd)


def case_eagle1_prefixed_stacked(tmp: Path, target) -> tuple[Head, Path]:  # noqa: ANN001
    head, cfg = built("eagle", target)
    sd = {f"model.{k}": v for k, v in stack(published_state_dict(head)).items()}
    sd["model.layers.0.input_layernorm.weight"] = torch.full((target.config.hidden_size,), 7.0)  # not EAGLE-1's: skipped
    return head, write(tmp, dict(cfg, architectures=["EagleLlamaForCausalLM"]), sd)


CASES: dict[str, Callable[[Path, object], tuple[Head, Path]]] = {
    "specforge-eagle3": case_specforge_eagle3,
    "vllm-layers0-stacked": case_vllm_layers0_stacked,
    "eagle3-full-vocab-no-d2t-no-lm-head": case_eagle3_full_vocab_shared_lm_head,
    "eagle3-plain-arch-bin": case_eagle3_plain_arch_bin,
    "original-eagle1": case_original_eagle1,
    "eagle1-no-fc-bias": case_eagle1_without_fc_bias,
    "eagle1-prefixed-stacked": case_eagle1_prefixed_stacked,
}


def logits(head: Head, vocab: int, feat_width: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 10), generator=g)
    feat = torch.randn(2, 10, feat_width, generator=g)
    with torch.no_grad():
        return head_logits(head, unroll(head, ids, feat, 2)[1])


@pytest.mark.parametrize("case", list(CASES))
def test_other_layouts_load_with_the_same_logits(tmp_path: Path, target, case: str) -> None:  # noqa: ANN001
    ref, folder = CASES[case](tmp_path / case, target)
    head = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert type(head) is type(ref)
    mine = head.state_dict()
    for k, t in ref.state_dict().items():
        if k == "fc.bias" and k not in mine:  # built without one: the reference's is zero
            assert not t.any()
        elif not k.startswith("shared."):
            torch.testing.assert_close(mine[k], t, rtol=0, atol=0, msg=k)
    if isinstance(head, Eagle3Head):
        assert torch.equal(head.to_target_ids(torch.arange(head.draft_vocab_size)), ref.to_target_ids(torch.arange(ref.draft_vocab_size)))
    width = target.config.hidden_size * (3 if isinstance(ref, Eagle3Head) else 1)
    torch.testing.assert_close(logits(head, target.config.vocab_size, width), logits(ref, target.config.vocab_size, width))


def test_a_foreign_layout_serves_losslessly(tmp_path: Path, tiny_checkpoint, target) -> None:  # noqa: ANN001
    _, folder = case_specforge_eagle3(tmp_path / "h", target)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    ps = [[5, 9, 2, 7, 5, 9], [1, 2, 3]]
    plain = LLM(str(tiny_checkpoint("llama")), device="cpu", progress=False).generate(ps, params)
    spec = LLM(str(tiny_checkpoint("llama")), device="cpu", progress=False,
               speculative_config={"method": "eagle3", "model": str(folder), "num_speculative_tokens": 3, "adaptive": False})
    assert [o.outputs[0].token_ids for o in spec.generate(ps, params)] == [o.outputs[0].token_ids for o in plain]
    assert spec.engine.spec_stats.num_drafts > 0


# ---- export: our names under the other loaders' rules -------------------------------------
STACKED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}


def _stacked(name: str) -> str:
    for part, fused in STACKED.items():
        name = name.replace(f".{part}.", f".{fused}.")
    return name


def sglang_eagle3(name: str) -> str | None:
    """SGLang ``LlamaForCausalLMEagle3.load_weights``: d2t kept as hot ids, t2d skipped,
    stacked names; parameters under ``model.`` except ``lm_head``."""
    if name in ("d2t", "t2d"):
        return {"d2t": "hot_token_id", "t2d": None}[name]
    name = _stacked(name)
    return name if name.startswith("lm_head") else f"model.{name}"


def vllm_eagle3(name: str) -> str | None:
    """vLLM ``Eagle3LlamaForCausalLM.load_weights``: t2d skipped, d2t ->
    draft_id_to_target_id, ``model.`` before all but lm_head, midlayer -> layers.0, stacked."""
    if name == "t2d":
        return None
    if name == "d2t":
        return "draft_id_to_target_id"
    name = _stacked(name.replace("midlayer.", "layers.0."))
    return name if name.startswith("lm_head") else f"model.{name}"


def sglang_eagle1(name: str) -> str | None:
    """SGLang ``LlamaForCausalLMEagle``: ``model.`` prefix, Llama's stacked loading."""
    return None if name.startswith("lm_head") else f"model.{_stacked(name)}"


LAYER = {"self_attn.qkv_proj.weight", "self_attn.o_proj.weight", "mlp.gate_up_proj.weight", "mlp.down_proj.weight",
         "post_attention_layernorm.weight"}
THEIR_PARAMS = {  # parameters not shared with the target (embedding, EAGLE-1's LM head)
    "sglang-eagle3": (sglang_eagle3, {"model.fc.weight", "model.norm.weight", "lm_head.weight", "hot_token_id"}
                      | {f"model.midlayer.{p}" for p in LAYER | {"input_layernorm.weight", "hidden_norm.weight"}}),
    "vllm-eagle3": (vllm_eagle3, {"model.fc.weight", "model.norm.weight", "lm_head.weight", "draft_id_to_target_id"}
                    | {f"model.layers.0.{p}" for p in LAYER | {"input_layernorm.weight", "hidden_norm.weight"}}),
    "sglang-eagle1": (sglang_eagle1, {"model.fc.weight", "model.fc.bias"} | {f"model.layers.0.{p}" for p in LAYER}),
}


@pytest.mark.parametrize("loader", list(THEIR_PARAMS))
def test_saved_heads_use_the_other_loaders_names(tmp_path: Path, target, loader: str) -> None:  # noqa: ANN001
    method = "eagle1" if loader.endswith("eagle1") else "eagle3"
    draft = torch.arange(0, target.config.vocab_size, 2) if method == "eagle3" else None
    head, cfg = built("eagle" if method == "eagle1" else "eagle3", target, draft=draft)
    folder = save_head(head, cfg, tmp_path / "h", dtype=torch.float32)
    sd = load_file(str(folder / "model.safetensors"))
    rule, params = THEIR_PARAMS[loader]
    landed = {rule(k) for k in sd} - {None}
    assert landed <= params, f"names {loader} would skip: {sorted(landed - params)}"
    assert landed == params, f"{loader} parameters left at their init: {sorted(params - landed)}"
    conf = json.loads((folder / "config.json").read_text())
    assert conf["tie_word_embeddings"] is False and conf["num_hidden_layers"] == 1
    if method == "eagle3":
        assert conf["architectures"] == ["LlamaForCausalLMEagle3"] and conf["bias"] is False
        assert conf["draft_vocab_size"] == sd["lm_head.weight"].shape[0] == draft.numel()
        assert conf["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 1]
        assert sd["d2t"].dtype == torch.int64 and sd["t2d"].dtype == torch.bool
    else:
        assert conf["architectures"] == ["LlamaForCausalLMEagle"] and conf["bias"] is True
    # and back: the saved head loads here with the same logits
    loaded = load_draft_head(folder, target, torch.float32, torch.device("cpu"))
    assert isinstance(loaded, EagleHead if method == "eagle1" else Eagle3Head)
    width = target.config.hidden_size * (3 if method == "eagle3" else 1)
    torch.testing.assert_close(logits(loaded, target.config.vocab_size, width), logits(head, target.config.vocab_size, width))


def test_an_eagle3_head_reading_four_layers_loads_and_a_mismatch_is_one_clear_error(tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    """Ours may read more target layers than EAGLE-3's three (``--aux-layers``): the config's list
    sizes fc, the folder loads; an fc whose width disagrees with the list is a CheckpointError that
    says both, and layers past the target are refused when the engine is set up."""
    import re

    from updraft.config import ConfigError
    from updraft.errors import CheckpointError
    from updraft.testing import write_eagle3_head

    deep = load_checkpoint(tiny_checkpoint("llama", num_hidden_layers=4), dtype=torch.float32, device="cpu",
                           progress=False)
    folder = write_eagle3_head(tmp_path / "h4", aux_layers=(0, 1, 2, 3))
    head = load_draft_head(folder, deep.model, torch.float32, torch.device("cpu"))
    assert isinstance(head, Eagle3Head) and head.fc.weight.shape[1] == 4 * deep.model.config.hidden_size
    cfg = json.loads((folder / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 1, 3]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=re.escape("fc.weight has 256 columns (4 target layers' features); "
                                                        "the config names 3 layers")):
        load_draft_head(folder, deep.model, torch.float32, torch.device("cpu"))
    far = write_eagle3_head(tmp_path / "far", aux_layers=(0, 1, 2, 5))
    with pytest.raises(ConfigError, match=r"aux layers \[0, 1, 2, 5\] are invalid for a 4-layer target"):
        LLM(str(deep.source), device="cpu", progress=False,
            speculative_config={"method": "eagle3", "draft_model": str(far), "num_steps": 2})

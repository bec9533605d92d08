"""Draft-head checkpoints as other engines' trainers save them, normalised to one layout.

What the loader meets in the wild, and what it turns it into (``updraft.models.eagle``'s module
names):

* architectures: ``LlamaForCausalLMEagle`` / ``LlamaForCausalLMEagle3`` (SGLang, SpecForge,
  the EAGLE repo's EAGLE-3 heads), vLLM's ``EagleLlamaForCausalLM`` / ``Eagle3LlamaForCausalLM``,
  and plain ``LlamaForCausalLM`` (the original EAGLE-1 heads; vLLM and SGLang take the kind from
  the speculative method). For the latter the tensors decide: ``midlayer.*`` or ``d2t`` or an
  ``fc`` over three target widths is EAGLE-3, an ``fc`` over two widths EAGLE-1.
* key prefixes: ``model.`` (exporters that save the wrapped model) is dropped.
* EAGLE-3's decoder layer as ``midlayer.*`` (EAGLE repo, SpecForge, SGLang) or ``layers.0.*``
  (vLLM names its one layer so and renames ``midlayer.`` on load).
* ours only: standard decoder layers after EAGLE-3's mid layer as ``layers.1.*``, ``layers.2.*``,
  ... (``updraft train-draft --head-layers``); their count comes from the tensors.
* q/k/v and gate/up as separate matrices (every trainer) or already stacked as ``qkv_proj`` /
  ``gate_up_proj`` (a state dict dumped from an inference engine); both load.
* ``t2d`` (bool over the target vocabulary) is derivable from ``d2t`` and dropped; ``d2t`` may be
  absent when the draft vocabulary is the target's (vLLM then maps ids one to one).
* EAGLE-1's ``fc`` bias: configs without a ``bias`` field (the original heads) get it from the
  tensors (the EAGLE repo trains with one; heads trained elsewhere may have none).
* an EAGLE-1 layer-0 ``input_layernorm.weight``: EAGLE-1 has no norm there (the EAGLE repo
  deletes it; SGLang and vLLM replace it by the identity and skip the tensor): skipped too.
"""

from __future__ import annotations

from typing import Any

import torch

from updraft.errors import CheckpointError

#: Architecture names of draft heads -> our kind.
EAGLE_ARCHS = {
    "LlamaForCausalLMEagle": "eagle",
    "EagleLlamaForCausalLM": "eagle",
    "LlamaForCausalLMEagle3": "eagle3",
    "Eagle3LlamaForCausalLM": "eagle3",
}
#: Architectures a head folder may carry when only the tensors say which head it is.
PLAIN_ARCHS = ("LlamaForCausalLM",)


def config_kind(cfg: dict[str, Any]) -> str | None:
    """``"eagle"`` or ``"eagle3"`` from the config's architectures; None for a plain Llama
    (``kind_from_tensors`` decides); anything else is refused."""
    archs = cfg.get("architectures") or []
    kind = next((EAGLE_ARCHS[a] for a in archs if a in EAGLE_ARCHS), None)
    if kind is None and not any(a in PLAIN_ARCHS for a in archs):
        raise CheckpointError(
            f"draft head config has architectures {archs}; expected one of {', '.join(EAGLE_ARCHS)} "
            "(or LlamaForCausalLM with EAGLE tensors)"
        )
    return kind


def kind_from_tensors(cfg: dict[str, Any], sd: dict[str, torch.Tensor]) -> str:
    """The head kind of a folder whose config names a plain Llama, from its tensors."""
    names = {k.removeprefix("model.") for k in sd}
    if "d2t" in names or any(k.startswith("midlayer.") for k in names):
        return "eagle3"
    fc = sd.get("fc.weight", sd.get("model.fc.weight"))
    if fc is not None and fc.dim() == 2:
        hidden = int(cfg.get("hidden_size") or fc.shape[0])
        target = int(cfg.get("target_hidden_size") or hidden)
        if fc.shape[1] == 3 * target:
            return "eagle3"
        if fc.shape[1] == hidden + target:
            return "eagle"
        if fc.shape[1] % target == 0 and fc.shape[1] // target > 3:  # ours may read more than three layers
            return "eagle3"
    raise CheckpointError(
        f"draft head config has architectures {cfg.get('architectures')} and its tensors are no EAGLE head's "
        "(expected fc.weight over 2, or 3 or more, hidden widths)"
    )


def normalize_config(cfg: dict[str, Any], kind: str, sd: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The config with what the tensors imply filled in (``bias`` of EAGLE-1's ``fc``)."""
    out = dict(cfg)
    if kind == "eagle" and "bias" not in out:
        out["bias"] = "fc.bias" in sd
    if kind == "eagle3":
        # Our multi-layer heads keep layers 1.. as ``layers.{i}.*`` (``layers.0`` is vLLM's name for
        # the mid layer). The tensors decide: published configs often copy the target's count.
        extra = [int(k.split(".")[1]) for k in sd if k.startswith("layers.") and k.split(".")[1].isdigit()]
        out["num_hidden_layers"] = 1 + max((i for i in extra if i >= 1), default=0)
    if out.get("norm_before_residual"):
        # vLLM's variant normalises the feature before it becomes the residual: other math.
        raise CheckpointError("draft head config sets norm_before_residual: that EAGLE-3 variant is not supported")
    return out


def normalize_state_dict(sd: dict[str, torch.Tensor], kind: str) -> dict[str, torch.Tensor]:
    """Tensor names in our layout (see the module docstring); values untouched."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in sd.items():
        name = name.removeprefix("model.")
        if kind == "eagle3":
            if name == "t2d":
                continue
            if name.startswith("layers.0."):
                name = "midlayer." + name.removeprefix("layers.0.")
        elif name == "layers.0.input_layernorm.weight":
            continue
        if name in out:
            raise CheckpointError(f"draft head has tensor {name!r} twice (with and without a prefix)")
        out[name] = tensor
    return out

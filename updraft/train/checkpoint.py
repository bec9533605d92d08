"""Where a training run continues from: the full checkpoint on the machine that ran it, or the
small state it carries to another machine.

* ``checkpoint/state.pt`` (``save_checkpoint`` / ``read_checkpoint``, ``--resume``): head,
  optimizer, schedule, position in the data, RNG -- a resumed run equals an uninterrupted one. It
  is large (fp32 head plus two AdamW moments: ~120 MB for the SmolLM2 EAGLE-3 head) and lives in
  ``OUT``, which is lost when the machine is handed back.
* The head folder itself (``--resume-from HEAD``): the saved head (bf16, split into files of at
  most ``--max-file-mb``) and ``train_state.json`` (``CarriedState``: the schedule, the position
  in the data, the logs and the data fingerprint). A few small files, brought back after each
  run; the next run, on any machine, regenerates the data from the seed and continues the same
  schedule from there with a fresh optimizer (re-warmed over ``--rewarm-steps``). With AdamW's
  beta2 = 0.95 the moments forget within ~20 steps, so losing them costs little.
* ``--init-from HEAD``: the weights only, with a new schedule.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from updraft.models.eagle import (
    DraftHeadConfig,
    Eagle3Head,
    aux_count,
    default_aux_layers,
    load_draft_head,
)
from updraft.train.config import TrainConfig
from updraft.train.data import DistillData
from updraft.train.heads import Head, new_head, resize_draft_vocab, select_draft_vocab

#: Config fields a resumed run must share with the checkpoint (the rest may change).
RESUME_KEYS = (
    "method", "seed", "num_prompts", "held_out", "max_new_tokens", "temperature", "batch_tokens", "lr",
    "min_lr_ratio", "warmup_steps", "weight_decay", "grad_clip", "ttt_steps", "step_decay", "feature_weight",
    "token_weight", "draft_vocab_size", "steps", "epochs", "train_seconds", "early_weight", "early_tokens",
    "head_layers", "hard_label_weight", "feature_noise", "aux_layers",
)
#: RESUME_KEYS added after checkpoints were written without them: their value in those runs.
_ADDED_KEYS: dict[str, Any] = {"early_weight": 1.0, "early_tokens": 128, "head_layers": None, "hard_label_weight": 0.0,
                                 "feature_noise": 0.0, "aux_layers": None}
STATE_NAME = "train_state.json"


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    batch_index: int = 0  # next batch of the epoch
    total_steps: int | None = None
    warmup: int = 0
    tokens_seen: int = 0  # training positions of all steps so far (the x axis of the learning curve)
    log: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CarriedState:
    """``train_state.json`` beside a saved head: what ``--resume-from`` continues."""

    state: TrainState
    config: dict[str, Any]  # the RESUME_KEYS of the run that saved it
    data: list[int]  # fingerprint of its training data (``data_fingerprint``)
    prompts_version: int

    def write(self, folder: Path) -> None:
        blob = {"state": asdict(self.state), "config": self.config, "data": self.data, "prompts_version": self.prompts_version}
        tmp = folder / f".{STATE_NAME}.tmp"
        tmp.write_text(json.dumps(blob, default=str) + "\n")
        os.replace(tmp, folder / STATE_NAME)

    @classmethod
    def read(cls, folder: Path) -> CarriedState:
        path = folder / STATE_NAME
        if not path.is_file():
            raise ValueError(f"resume_from: {folder} has no {STATE_NAME} (a head saved by train-draft before it kept one?): use --init-from")
        blob = json.loads(path.read_text())
        return cls(TrainState(**blob["state"]), blob["config"], blob["data"], int(blob["prompts_version"]))

    @classmethod
    def of(cls, state: TrainState, cfg: TrainConfig, fp: list[int], prompts_version: int) -> CarriedState:
        return cls(state, {k: getattr(cfg, k) for k in RESUME_KEYS}, fp, prompts_version)


def data_fingerprint(data: DistillData) -> list[int]:
    tok = data.tokens.cpu()
    return [data.num_seqs, data.num_tokens, int((tok * (torch.arange(tok.numel()) % 1009 + 1)).sum())]


def _check_keys(what: str, saved: dict[str, Any], cfg: TrainConfig) -> None:
    for k in RESUME_KEYS:
        was = saved.get(k, _ADDED_KEYS.get(k))
        if was != getattr(cfg, k):
            raise ValueError(f"{what}: {k}={getattr(cfg, k)!r} but the checkpoint was trained with {k}={was!r}")


def carried_state(cfg: TrainConfig, fp: list[int], prompts_version: int) -> TrainState:
    """The schedule state ``--resume-from`` continues, checked against this run's settings. Data
    that differs from the saved run's (a generation cut by its deadline, a new prompt set) is
    allowed with a warning: the schedule continues over the data there is."""
    assert cfg.resume_from is not None
    carried = CarriedState.read(Path(cfg.resume_from))
    _check_keys("resume_from", carried.config, cfg)
    if carried.data != fp or carried.prompts_version != prompts_version:
        print("[train-draft] warning: resume_from: the regenerated data differs from the data the head was trained on "
              "(a generation cut by its deadline, another GPU or prompt set): the schedule continues over this data",
              file=sys.stderr, flush=True)
    return carried.state


def save_checkpoint(path: Path, head: Head, opt: torch.optim.Optimizer, state: TrainState, cfg: TrainConfig, fp: list[int],
                    aux: tuple[int, ...] = ()) -> None:
    """``aux``: the target layers the head reads, as resolved (a warm start's come from its source
    head, not from ``cfg``): ``--resume`` reads them back (``run_aux_layers``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {
        "aux_layers": list(aux),
        "head": head.state_dict(), "optimizer": opt.state_dict(), "step": state.step, "epoch": state.epoch,
        "batch_index": state.batch_index, "total_steps": state.total_steps, "warmup": state.warmup,
        "log": state.log, "evals": state.evals, "config": cfg.as_dict(), "data": fp, "tokens_seen": state.tokens_seen,
        "rng": torch.get_rng_state(), "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    tmp = path.with_suffix(".tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)


def read_checkpoint(path: Path) -> dict[str, Any]:
    """This machine's checkpoint (``--resume``), read once: the head is built with its draft
    vocabulary (``checkpoint_draft_ids``), then its state loaded (``load_checkpoint_state``)."""
    if not path.is_file():
        raise ValueError(f"resume: no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=False)


def load_checkpoint_state(blob: dict[str, Any], head: Head, opt: torch.optim.Optimizer, cfg: TrainConfig,
                          fp: list[int]) -> TrainState:
    _check_keys("resume", blob["config"], cfg)
    if blob["data"] != fp:
        raise ValueError("resume: the data differs from the data the checkpoint was trained on")
    head.load_state_dict(blob["head"])
    opt.load_state_dict(blob["optimizer"])
    torch.set_rng_state(blob["rng"])
    if blob.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(blob["cuda_rng"])
    return TrainState(
        blob["step"], blob["epoch"], blob["batch_index"], blob["total_steps"], blob["warmup"], blob.get("tokens_seen", 0),
        blob["log"], blob["evals"],
    )


def checkpoint_draft_ids(blob: dict[str, Any]) -> torch.Tensor | None:
    """The EAGLE-3 draft vocabulary (target ids, ascending) of the head in a checkpoint
    (``read_checkpoint``), or None for EAGLE-1. ``--resume`` must rebuild the head with
    it: a run warm-started from another head (``--init-from``) trains that head's vocabulary,
    which the training targets' frequencies need not pick again. Built with the re-picked one,
    the resumed head loaded the old LM-head rows under new token ids and its labels came from
    the wrong rows (H100, 2026-11-27: held-out accuracy 0.65 -> 0.42 in one resumed run)."""
    d2t = blob["head"].get("d2t")
    return None if d2t is None else torch.arange(d2t.numel()) + d2t.long()


def run_aux_layers(cfg: TrainConfig, num_layers: int, blob: dict[str, Any] | None = None) -> tuple[int, ...]:
    """The target layers whose outputs the EAGLE-3 head of this run reads (() for EAGLE-1): under
    ``--resume`` the checkpoint ``blob``'s (checkpoints from before they were saved: as below);
    an ``--init-from`` / ``--resume-from`` head's own (its fc was trained on them; ``--aux-layers``
    may repeat them, or with ``--init-from`` extend them: those layers first, then more), else
    ``--aux-layers``, else EAGLE-3's default. Decided before any data is generated, so a bad value
    costs nothing."""
    if cfg.method != "eagle3":
        return ()
    if blob is not None and blob.get("aux_layers"):
        return tuple(int(i) for i in blob["aux_layers"])
    chosen = cfg.aux_layer_ids()
    source = cfg.init_from or cfg.resume_from
    if source:
        config = Path(source) / "config.json"  # there: TrainConfig.validate checked
        try:
            saved = DraftHeadConfig.from_hf(json.loads(config.read_text()), "eagle3").aux_layer_ids
        except (json.JSONDecodeError, AttributeError, TypeError, KeyError):
            raise ValueError(f"{config} is not a head's config (a JSON object with the model's fields)") from None
        have = saved or default_aux_layers(num_layers)
        extends = cfg.init_from is not None and chosen is not None and len(chosen) > len(have) and chosen[: len(have)] == have
        if chosen is not None and chosen != have and not extends:
            raise ValueError(f"aux_layers={cfg.aux_layers!r}: {source!r} reads target layers "
                             f"{','.join(map(str, have))}, which a warm start keeps (--init-from may extend them: "
                             "those layers first, then more)")
        chosen = chosen if extends else have
    ids = chosen or default_aux_layers(num_layers)
    if max(ids) >= num_layers:
        raise ValueError(f"aux_layers={','.join(map(str, ids))}: the target has {num_layers} layers (0-{num_layers - 1})")
    return ids


def warm_start(
    cfg: TrainConfig, target: Any, device: torch.device, counts: torch.Tensor | None = None,
) -> tuple[Head, dict[str, Any]] | None:
    """``--init-from`` / ``--resume-from``: a head built like ``new_head`` but holding a saved
    head's weights (and, for EAGLE-3, its draft vocabulary), for a run whose checkpoint
    (optimizer state) was lost. With ``--resize-draft-vocab`` the vocabulary is re-chosen at
    ``--draft-vocab-size`` from the training targets' ``counts``, the source's tokens first: a
    kept token keeps its trained LM-head row, a new one starts from a zero row. The head
    reads the source's target layers, or more where ``--aux-layers`` extends them (``run_aux_layers``,
    ``widen_fc``)."""
    name, source = ("init_from", cfg.init_from) if cfg.init_from else ("resume_from", cfg.resume_from)
    if not source:
        return None
    src = load_draft_head(source, target, torch.float32, device)
    aux = run_aux_layers(cfg, target.config.num_layers)
    if isinstance(src, Eagle3Head) != (cfg.method == "eagle3"):
        raise ValueError(f"{name}={source!r} holds a {type(src).__name__}, but method={cfg.method!r}")
    draft_ids = src.vocab_ids().cpu() if isinstance(src, Eagle3Head) else None
    grows = cfg.head_layers is not None and cfg.head_layers != src.config.num_layers
    if isinstance(src, Eagle3Head) and len(aux) != aux_count(src.head_config) and (cfg.resize_draft_vocab or grows):
        raise ValueError(f"aux_layers={cfg.aux_layers!r}: extend the target layers, grow the head and re-choose its "
                         "draft vocabulary in separate runs (one change a run)")
    if cfg.resize_draft_vocab and isinstance(src, Eagle3Head):
        if counts is None:
            raise ValueError("resize_draft_vocab: the training targets' token counts are needed to choose the vocabulary")
        new_ids = select_draft_vocab(counts, cfg.draft_vocab_size, first=draft_ids)
        return resize_draft_vocab(src, target, new_ids, aux or None, seed=cfg.seed, device=device)
    have = src.config.num_layers
    layers = cfg.head_layers or have
    if layers < have:
        raise ValueError(f"head_layers={layers}: {name}={source!r} has {have} layers (a head grows, never shrinks)")
    head, hf_cfg = new_head(cfg.method, target, draft_ids=draft_ids, aux_layers=aux or None, seed=cfg.seed,
                            device=device, intermediate_size=src.config.intermediate_size, num_layers=layers)
    own = head.state_dict()
    saved = {k: v for k, v in src.state_dict().items() if k in own}
    widened = widen_fc(head, saved)
    missing, _ = head.load_state_dict(saved, strict=False)
    added = grown_layers_identity(head, have)
    left = [k for k in missing if not k.startswith(added) and k not in widened]
    if left:
        raise ValueError(f"{name}={source!r}: the saved head has no {', '.join(left[:3])}")
    return head, hf_cfg


def widen_fc(head: Head, saved: dict[str, torch.Tensor]) -> tuple[str, ...]:
    """An EAGLE-3 head that reads more target layers than the saved one (``--aux-layers``
    extending the source's): ``fc``'s first columns take the saved ``fc.weight`` (the same layers,
    in the same order), the added layers' columns start at zero, so the head starts with the saved
    head's outputs exactly. Takes ``fc.weight`` out of ``saved``; returns the names it filled."""
    old = saved.get("fc.weight")
    if not isinstance(head, Eagle3Head) or old is None or old.shape == head.fc.weight.shape:
        return ()
    with torch.no_grad():
        head.fc.weight.zero_()
        head.fc.weight[:, : old.shape[1]].copy_(saved.pop("fc.weight"))
    return ("fc.weight",)


def grown_layers_identity(head: Head, first: int) -> tuple[str, ...]:
    """Zero the output projections (``o_proj``, ``down_proj``) of the decoder layers whose KV
    layer is ``first`` or later: a layer added to a trained head then passes its input stream
    through unchanged, so the grown head starts with the trained head's outputs exactly (and the
    added layers' gradients start at those two projections). Returns those layers' parameter
    name prefixes (EAGLE-3's layer 0 is its mid layer; ``head.layers`` holds the rest)."""
    added = []
    with torch.no_grad():
        for name, layer in head.layers.named_children():
            if layer.self_attn.layer_id >= first:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
                added.append(f"layers.{name}.")
    return tuple(added)

"""EAGLE draft heads in the published checkpoint layouts.

EAGLE-1/2 (``LlamaForCausalLMEagle``): ``fc`` (2h -> h, with bias) over concat(token embedding,
feature), then decoder layers (layer 0 has no input norm), no final norm; logits are the
target's LM head applied to the output feature, and the output feature is the next step's input
feature. Keys: ``fc.*``, ``layers.N.*``, optional ``embed_tokens.weight`` / ``lm_head.weight``.
A token map (``EagleHead.set_token_map``: frequent target ids, as SGLang's
``--speculative-token-map``) restricts the LM head to those rows; logits are then over the map
and ``to_target_ids`` turns a logit index back into a target id, as for EAGLE-3.

EAGLE-3 (``LlamaForCausalLMEagle3``): the target's hidden states of three layers are concatenated
(3h) and projected by ``fc`` (3h -> h); ``midlayer`` normalises the embedding (input_layernorm)
and the feature (hidden_norm) separately and attends over their concat (2h); the feature is the
residual. Logits come from ``lm_head(norm(out))`` over a draft vocabulary, mapped to target ids
by ``d2t`` (target = draft + d2t[draft]); the pre-norm output is the next step's feature. Keys:
``fc.weight``, ``midlayer.*``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``.

Both read ``batch.feature``: the target's feature (``FeatureKind.TARGET``: prefill, draft extend)
or their own previous feature (``FeatureKind.DRAFT``: draft decode); EAGLE-3 also the target's
feature already through its ``fc`` (``FeatureKind.PROJECTED``: the fused iteration's draft extend). Layout
variants of other engines' trainers are normalised by ``updraft.models.eagle_formats``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from updraft import ops
from updraft.batch import CaptureHidden, FeatureKind, ForwardBatch
from updraft.errors import CheckpointError, ModelNotFoundError
from updraft.models import fused
from updraft.models.config import ModelConfig
from updraft.models.eagle_formats import (
    config_kind,
    kind_from_tensors,
    normalize_config,
    normalize_state_dict,
)
from updraft.models.layers import GatedMLP, Linear, RMSNorm, RotaryEmbedding
from updraft.models.llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    ModelOutput,
    RowScale,
    finish_residual,
)


@dataclass(frozen=True)
class DraftHeadConfig:
    kind: str  # "eagle" or "eagle3"
    model: ModelConfig  # the head's own shape (num_layers = decoder layers of the head)
    target_hidden_size: int
    draft_vocab_size: int
    fc_bias: bool
    aux_layer_ids: tuple[int, ...] | None = None  # EAGLE-3 override from the head's config
    #: EAGLE-3 context tokens (``updraft.spec.context_vocab``): their extrapolated logits count as
    #: ``scale * logit + bias`` against the vocabulary's (config key ``updraft_context_vocab``,
    #: fitted on the head's own data by ``benchmarks/context_calibration.py``)
    context_scale: float = 1.0
    context_bias: float = 0.0

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], kind: str | None = None) -> DraftHeadConfig:
        """``kind`` given: the caller already knows it (e.g. from the tensors); else the
        config's architectures must name an EAGLE head."""
        kind = kind or config_kind(cfg)
        if kind is None:
            raise CheckpointError(f"draft head config has architectures {cfg.get('architectures')}: the kind of head is unknown")
        base = dict(cfg, architectures=["LlamaForCausalLM"])
        model = ModelConfig.from_hf(base)
        if kind == "eagle3":
            # The mid layer plus any standard layers after it (``layers.1..``). Loaded heads get the
            # count from their tensors (``normalize_config``): foreign configs often copy the target's.
            model = replace(model, num_layers=max(1, int(cfg.get("num_hidden_layers") or 1)))
        aux = None
        eagle_cfg = cfg.get("eagle_config") or {}
        if isinstance(eagle_cfg, dict) and eagle_cfg.get("eagle_aux_hidden_state_layer_ids"):
            aux = tuple(int(i) for i in eagle_cfg["eagle_aux_hidden_state_layer_ids"])
        scale, bias = context_calibration(cfg)
        return cls(
            kind=kind,
            model=model,
            target_hidden_size=int(cfg.get("target_hidden_size") or model.hidden_size),
            draft_vocab_size=int(cfg.get("draft_vocab_size") or model.vocab_size),
            fc_bias=bool(cfg.get("bias", kind == "eagle")),
            aux_layer_ids=aux,
            context_scale=scale,
            context_bias=bias,
        )


#: the head config's key for the context tokens' calibration: ``{"scale": s, "bias": b}``
CONTEXT_KEY = "updraft_context_vocab"


def context_calibration(cfg: dict[str, Any]) -> tuple[float, float]:
    """(scale, bias) from a head config (``CONTEXT_KEY``; (1, 0) when absent)."""
    entry = cfg.get(CONTEXT_KEY)
    if entry is None:
        return 1.0, 0.0
    try:
        scale, bias = float(entry.get("scale", 1.0)), float(entry.get("bias", 0.0))
    except (AttributeError, TypeError, ValueError):
        raise CheckpointError(f"draft head config {CONTEXT_KEY}={entry!r} is invalid: "
                              '{"scale": S, "bias": B} with numbers') from None
    if not (math.isfinite(scale) and scale > 0 and math.isfinite(bias)):
        raise CheckpointError(f"draft head config {CONTEXT_KEY}={entry!r} is invalid: the scale must be > 0 and both finite")
    return scale, bias


def _feature(batch: ForwardBatch, projected: bool = False) -> torch.Tensor:
    """``batch.feature``: a target or draft feature (``projected``: or a projected target one)."""
    kinds = (FeatureKind.TARGET, FeatureKind.DRAFT) + ((FeatureKind.PROJECTED,) if projected else ())
    if batch.feature is None or batch.feature_kind not in kinds:
        raise ValueError(f"an EAGLE head needs one of {', '.join(k.name for k in kinds)} as its feature, "
                         f"got {batch.feature_kind.name}")
    return batch.feature


def aux_count(hc: DraftHeadConfig) -> int:
    """How many target layers' outputs an EAGLE-3 head's ``fc`` reads: its config's list
    (``eagle_aux_hidden_state_layer_ids``; ours may name more than EAGLE-3's three), else three."""
    return len(hc.aux_layer_ids) if hc.aux_layer_ids else 3


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's default target layers (outputs of): low, middle, high."""
    return (1, num_layers // 2 - 1, num_layers - 4) if num_layers >= 5 else (0, max(0, num_layers // 2 - 1), num_layers - 1)


class _SharedWeights(nn.Module):
    """Embedding / LM head of the draft: its own when the checkpoint has them, else the target's
    (held by reference, not copied, and not registered as the head's parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.own_embed: nn.Embedding | None = None
        self.own_lm_head: nn.Linear | None = None
        self._target: list[LlamaForCausalLM] = []  # a list keeps it out of the module tree

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        if self.own_embed is not None:
            return self.own_embed(ids)
        return self._target[0].embed(ids)

    def embed_table(self) -> torch.Tensor:
        """The embedding weight ``embed`` gathers rows of."""
        if self.own_embed is not None:
            return self.own_embed.weight
        return self._target[0].model.embed_tokens.weight

    def lm_head_weight(self) -> torch.Tensor:
        if self.own_lm_head is not None:
            return self.own_lm_head.weight
        return self._target[0].lm_head_weight


class EagleHead(nn.Module):
    """EAGLE-1/2 draft head."""

    def __init__(self, hc: DraftHeadConfig) -> None:
        super().__init__()
        cfg = hc.model
        self.head_config = hc
        self.config = cfg
        self.shared = _SharedWeights()
        self.fc = Linear(cfg.hidden_size + hc.target_hidden_size, cfg.hidden_size, bias=hc.fc_bias)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.layers[0].input_layernorm = nn.Identity()  # type: ignore[assignment]
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)
        # Token map (None: the full vocabulary). Not persistent: never saved with the head.
        self.hot_ids: torch.Tensor | None
        self.hot_lm_head: torch.Tensor | None
        self.register_buffer("hot_ids", None, persistent=False)
        self.register_buffer("hot_lm_head", None, persistent=False)

    def set_token_map(self, ids: torch.Tensor | None) -> None:
        """Evaluate the LM head only over the rows ``ids`` (distinct target token ids): logits
        are then ``[rows, len(ids)]`` and ``to_target_ids`` maps an index back. None: full
        vocabulary again.

        Hazards: the truncated LM head is a copy (``len(ids) x hidden``) taken now, so set the
        map after the LM head's final weights are in place; graphs captured before the call keep
        the old width (set it before capture)."""
        if ids is None:
            self.hot_ids = self.hot_lm_head = None
            return
        w = self.shared.lm_head_weight()
        hot = ids.to(device=w.device, dtype=torch.long)
        self.hot_ids = hot
        self.hot_lm_head = w[hot].contiguous()

    @property
    def draft_vocab_size(self) -> int:
        return int(self.hot_ids.numel()) if self.hot_ids is not None else self.config.vocab_size

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if self.hot_ids is None else self.hot_ids[draft_ids]

    def _lm_weight(self) -> torch.Tensor:
        return self.hot_lm_head if self.hot_lm_head is not None else self.shared.lm_head_weight()

    @torch.no_grad()
    def forward(self, batch: ForwardBatch) -> ModelOutput:
        feat = _feature(batch)
        h = self.fc(torch.cat([self.shared.embed(batch.input_ids), feat.to(self.fc.weight.dtype)], dim=-1))
        residual: torch.Tensor | None = None
        for layer in self.layers:
            h, residual = layer(h, residual, batch, self.rotary)
        h = finish_residual(h, residual)  # no final norm: the output feature is the residual stream
        rows = batch.logit_rows(h)
        return ModelOutput(logits=self.logits_from_feature(rows, batch.fp32_logits),
                           hidden=h if batch.capture_hidden == CaptureHidden.FULL else rows)

    def logits_from_feature(self, feat: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        """The logits ``forward`` computes for rows whose output feature is ``feat`` (over the
        token map when one is set); float32, or the model's dtype (``fp32`` off)."""
        logits = ops.dense(feat, self._lm_weight())
        return logits.float() if fp32 else logits


class Eagle3Layer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(cfg, 0, in_features=2 * cfg.hidden_size)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, emb: torch.Tensor, feat: torch.Tensor, batch: ForwardBatch, rotary: RotaryEmbedding
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(mlp_out, residual)``: the layer's output feature is their sum (the head's
        final norm fuses it). ``feat`` is not modified (it may be a graph's static input)."""
        x = torch.cat([self.input_layernorm(emb), self.hidden_norm(feat)], dim=-1)
        x = self.self_attn(x, batch, rotary)
        x, residual = self.post_attention_layernorm.forward_add(x, feat)
        return self.mlp(x), residual


class Eagle3Head(nn.Module):
    """EAGLE-3 draft head with its own (usually reduced) draft vocabulary.

    ``config.num_layers > 1``: standard Llama decoder layers ``layers.1 ..`` (KV layers 1 ..) run
    on the mid layer's output stream before the final norm; the output feature is the stream after
    the last. Ours (``updraft train-draft --head-layers``), not a published layout."""

    def __init__(self, hc: DraftHeadConfig) -> None:
        super().__init__()
        cfg = hc.model
        self.head_config = hc
        self.config = cfg
        self.shared = _SharedWeights()
        self.fc = Linear(aux_count(hc) * hc.target_hidden_size, cfg.hidden_size, bias=hc.fc_bias)
        self.midlayer = Eagle3Layer(cfg)
        # Keys "1", "2", ..: the tensors are ``layers.{i}.*`` (``layers.0`` is vLLM's mid layer name).
        self.layers = nn.ModuleDict({str(i): LlamaDecoderLayer(cfg, i) for i in range(1, cfg.num_layers)})
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = Linear(cfg.hidden_size, hc.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(hc.draft_vocab_size, dtype=torch.long))
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)
        #: (FP8 weight, float32 scale per row) of ``lm_head`` (``quantize_lm_head``), or None
        self.lm_head_fp8: tuple[torch.Tensor, torch.Tensor] | None = None

    def quantize_lm_head(self, on: bool = True) -> None:
        """Serve the LM head from an FP8 copy (e4m3, a float32 scale per row: half the bytes of
        bf16) where the small-M kernel takes the rows (``fused.lm_head_fp8``); other rows and
        ``logits_from_feature`` keep the weight. Drafts only propose: the target's verify keeps
        the output lossless, the rounding can only change what is accepted. Call after the
        weights are loaded and before graph capture (a copy is taken now); ``on`` False drops
        the copy (graphs captured after serve the weight)."""
        from updraft.ops.gemv import quantize_rows_fp8

        self.lm_head_fp8 = quantize_rows_fp8(self.lm_head.weight) if on else None

    def _logits(self, rows: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        if self.lm_head_fp8 is not None:
            out = fused.lm_head_fp8(rows, *self.lm_head_fp8)
            if out is not None:
                return out  # float32 from the kernel either way
        logits = self.lm_head(rows)
        return logits.float() if fp32 else logits

    def project_target(self, feat: torch.Tensor) -> torch.Tensor:
        """The target's captured layers ``[T, aux x target hidden]`` in the head's feature space
        (``fc``): what ``forward`` does first with a ``FeatureKind.TARGET`` feature, and does not
        with a ``PROJECTED`` one."""
        return self.fc(feat.to(self.fc.weight.dtype))

    def project_for(self, feat: torch.Tensor, batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``project_target(feat)`` for ``batch``, the forward that will read it as PROJECTED, and
        ``feature_qkv_for`` those rows. Neither reads the batch's tokens: the fused iteration runs
        this beside the verify's last layers and LM head."""
        rows = self.project_target(feat)
        return rows, self.feature_qkv_for(rows, batch)

    def feature_qkv_for(self, feat: torch.Tensor, batch: ForwardBatch) -> torch.Tensor | None:
        """Where ``batch`` (reading ``feat`` as its PROJECTED or DRAFT feature) takes the fused mid
        layer: the layer's QKV product of ``feat`` (``ForwardBatch.feature_qkv``); else None."""
        if not fused.eagle3_ok(self.midlayer, self.shared.embed_table(), batch.input_ids, feat, batch, self.rotary,
                               split=True):
            return None
        return fused.eagle3_feature_qkv(self.midlayer, feat)

    @property
    def one_layer(self) -> bool:
        """Whether the head is its mid layer alone (a draft extend's rows then need each other
        only through their keys and values: ``store_kv``)."""
        return not self.layers

    def store_kv(self, ids: torch.Tensor, qkv: torch.Tensor, batch: ForwardBatch, positions: torch.Tensor,
                 loc: torch.Tensor) -> None:
        """The mid layer's keys and values of tokens ``ids`` whose input features' QKV product is
        ``qkv`` (``feature_qkv_for`` over ``batch``), at ``positions``, into slots ``loc`` of
        ``batch``'s pool: what a forward over those rows stores, without the rest of it. Only
        where ``feature_qkv_for`` gave the product (the fused mid layer)."""
        fused.eagle3_store_kv(self.midlayer, self.shared.embed_table(), ids, qkv, batch, self.rotary, positions, loc)

    @torch.no_grad()
    def forward(self, batch: ForwardBatch, feature_ready: Callable[[torch.Tensor], None] | None = None) -> ModelOutput:
        """``feature_ready``: called with the output feature (``ModelOutput.hidden``) as soon as it
        is written, before the LM head runs (the fused iteration forks the next draft step's QKV
        product of it there)."""
        feat = _feature(batch, projected=True)
        if batch.feature_kind == FeatureKind.TARGET:
            if batch.feature_qkv is not None:
                raise ValueError("ForwardBatch.feature_qkv is the product of the head's input feature, not the target's")
            feat = self.project_target(feat)
        table, ids, qkv = self.shared.embed_table(), batch.input_ids, batch.feature_qkv
        fast = fused.eagle3_ok(self.midlayer, table, ids, feat, batch, self.rotary, split=qkv is not None)
        if qkv is not None and not fast:
            raise ValueError("ForwardBatch.feature_qkv is for the fused mid layer, which these inputs do not take")
        scale = None
        if fast and batch.unscaled_logits and not self.layers:
            # The reader applies each row's 1 / rms (> 0) itself: the rows times the norm weight,
            # which the down projection writes with the feature, feed the LM head, and the norm's
            # launch is left out.
            nr = fused.eagle3_midlayer_normed(self.midlayer, table, ids, feat, batch, self.rotary, self.norm, qkv)
            normed, out = nr.scaled, nr.stream
            scale = RowScale(batch.logit_rows(nr.sumsq), nr.stream.shape[1], nr.eps)
        else:
            x, residual = (fused.eagle3_midlayer(self.midlayer, table, ids, feat, batch, self.rotary, qkv) if fast
                           else self.midlayer(self.shared.embed(ids), feat, batch, self.rotary))
            for layer in self.layers.values():
                x, residual = layer(x, residual, batch, self.rotary)
            # One pass gives the pre-norm output feature (next step's input) and its norm (the
            # logits' input); normalising every row and then selecting equals selecting first.
            normed, out = self.norm.forward_add(x, residual)
        hidden = out if batch.capture_hidden == CaptureHidden.FULL else batch.logit_rows(out)
        if feature_ready is not None:
            feature_ready(hidden)
        rows = batch.logit_rows(normed)
        if batch.head_rows and self.lm_head_fp8 is None:
            return ModelOutput(logits=None, hidden=hidden, row_scale=scale, head_rows=rows)
        return ModelOutput(logits=self._logits(rows, batch.fp32_logits), hidden=hidden, row_scale=scale)

    def logits_from_feature(self, feat: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        """Draft-vocabulary logits of rows whose pre-norm output feature is ``feat`` (float32, or
        the model's dtype with ``fp32`` off)."""
        return self.logits_from_normed(self.first_norm(feat), fp32)

    @property
    def first_norm(self) -> RMSNorm:
        """The norm ``logits_from_feature`` applies before the LM head (the fused iteration's
        ``read_rows`` applies it as it gathers the features, then ``logits_from_normed``)."""
        return self.norm

    def logits_from_normed(self, normed: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        """``logits_from_feature`` of features whose ``first_norm`` is ``normed``."""
        logits = self.lm_head(normed)
        return logits.float() if fp32 else logits

    @property
    def draft_vocab_size(self) -> int:
        return self.lm_head.out_features

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def vocab_ids(self) -> torch.Tensor:
        """The target ids of the whole draft vocabulary, in draft order (ascending)."""
        return self.to_target_ids(torch.arange(self.draft_vocab_size, device=self.d2t.device))


DraftHead = EagleHead | Eagle3Head


def draft_to_target(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """How a draft model's logit indices become target token ids: None when its logits are over
    the target vocabulary (a standalone LM, an EAGLE-1 head without a token map). Callers that
    capture graphs read this once, so a token map must be set before they are built."""
    if isinstance(model, Eagle3Head) or (isinstance(model, EagleHead) and model.hot_ids is not None):
        return model.to_target_ids
    return None


def _read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    st_files = sorted(folder.glob("*.safetensors"))
    bin_files = sorted(folder.glob("pytorch_model*.bin"))
    out: dict[str, torch.Tensor] = {}
    try:
        if st_files:
            from safetensors.torch import load_file

            for f in st_files:
                out.update(load_file(str(f)))
        elif bin_files:
            for f in bin_files:
                out.update(torch.load(str(f), map_location="cpu", weights_only=True))
        else:
            raise CheckpointError(f"draft head folder {folder} has no *.safetensors or pytorch_model*.bin")
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - any library error becomes one clear line
        raise CheckpointError(f"cannot read draft head weights in {folder}: {str(exc).splitlines()[0]}") from None
    # Some exporters prefix everything with "model."; the published layout has no prefix.
    return {k.removeprefix("model."): v for k, v in out.items()}


def load_draft_head(path: str | Path, target: LlamaForCausalLM, dtype: torch.dtype, device: torch.device) -> DraftHead:
    """Load an EAGLE / EAGLE-3 head folder and bind it to ``target`` (shared embedding / LM head).
    Other engines' layouts are accepted (``updraft.models.eagle_formats``)."""
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"draft head {path} not found: expected a folder with config.json")
    try:
        raw = json.loads((folder / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{folder / 'config.json'} is not valid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{folder / 'config.json'} is not a JSON object")
    kind = config_kind(raw)
    sd = _read_state_dict(folder)
    kind = kind or kind_from_tensors(raw, sd)
    sd = normalize_state_dict(sd, kind)
    hc = DraftHeadConfig.from_hf(normalize_config(raw, kind, sd), kind)
    tcfg = target.config
    if hc.target_hidden_size != tcfg.hidden_size:
        raise CheckpointError(
            f"draft head expects target hidden size {hc.target_hidden_size}, the target has {tcfg.hidden_size}"
        )
    if hc.model.vocab_size != tcfg.vocab_size:
        raise CheckpointError(f"draft head vocabulary is {hc.model.vocab_size} tokens, the target's is {tcfg.vocab_size}")
    head: DraftHead = EagleHead(hc) if hc.kind == "eagle" else Eagle3Head(hc)
    head.shared._target.append(target)
    if "embed_tokens.weight" in sd:
        head.shared.own_embed = nn.Embedding(hc.model.vocab_size, hc.model.hidden_size)
        sd["shared.own_embed.weight"] = sd.pop("embed_tokens.weight")
    if hc.kind == "eagle" and "lm_head.weight" in sd:
        head.shared.own_lm_head = Linear(hc.model.hidden_size, hc.model.vocab_size, bias=False)
        sd["shared.own_lm_head.weight"] = sd.pop("lm_head.weight")
    if isinstance(head, Eagle3Head):
        _fill_full_vocab_eagle3(head, sd, target, folder)
        fc = sd.get("fc.weight")
        if fc is not None and fc.dim() == 2 and fc.shape[1] != head.fc.weight.shape[1]:
            raise CheckpointError(
                f"{folder}: fc.weight has {fc.shape[1]} columns ({fc.shape[1] / hc.target_hidden_size:g} target layers' "
                f"features); the config names {aux_count(hc)} layers (eagle_config.eagle_aux_hidden_state_layer_ids)"
            )
    head.to(dtype=dtype)
    expected = {k: v for k, v in head.state_dict().items()}
    _fuse_into(head, sd, expected, folder)
    head.to(device)
    if isinstance(head, Eagle3Head):
        head.d2t = head.d2t.to(device=device, dtype=torch.long)
        top = int((head.d2t + torch.arange(hc.draft_vocab_size, device=device)).max())
        if top >= tcfg.vocab_size:
            raise CheckpointError(f"draft head d2t maps to token {top}, outside the target vocabulary of {tcfg.vocab_size}")
    head.rotary.build(device, dtype)
    head.eval()
    return head


def _fill_full_vocab_eagle3(head: Eagle3Head, sd: dict[str, torch.Tensor], target: LlamaForCausalLM, folder: Path) -> None:
    """An EAGLE-3 head over the whole target vocabulary may come without ``d2t`` (ids map one to
    one, as vLLM reads it) or without ``lm_head.weight`` (SGLang then takes the target's LM
    head): fill them in. A reduced draft vocabulary needs both."""
    full = head.draft_vocab_size == target.config.vocab_size
    for name in ("d2t", "lm_head.weight"):
        if name not in sd and not full:
            raise CheckpointError(
                f"{folder}: EAGLE-3 head with a {head.draft_vocab_size}-token draft vocabulary has no {name}"
            )
    sd.setdefault("d2t", torch.zeros(head.draft_vocab_size, dtype=torch.long))
    if "lm_head.weight" not in sd:
        sd["lm_head.weight"] = target.lm_head_weight.detach()


def _fuse_into(head: nn.Module, sd: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], folder: Path) -> None:
    """Copy checkpoint tensors (q/k/v and gate/up separate) into the head's fused parameters."""
    fused = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2), "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
    loaded: set[str] = set()
    with torch.no_grad():
        for name, tensor in sd.items():
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2] in fused:
                target_name, shard = fused[parts[-2]]
                module = head.get_submodule(".".join(parts[:-2] + [target_name]))
                try:
                    module.load_shard(shard, parts[-1], tensor)  # type: ignore[operator]
                except ValueError as exc:
                    raise CheckpointError(f"{folder}: {name}: {exc}") from None
                loaded.add(".".join(parts[:-2] + [target_name, parts[-1]]) + f"#{shard}")
                continue
            if name not in expected:
                raise CheckpointError(f"{folder}: unexpected tensor {name!r} for a {type(head).__name__}")
            dst = expected[name]
            if tuple(dst.shape) != tuple(tensor.shape):
                raise CheckpointError(
                    f"{folder}: {name} has shape {tuple(tensor.shape)}, expected {tuple(dst.shape)} "
                    "(hidden size or vocabulary does not match the config)"
                )
            dst.copy_(tensor)
            loaded.add(name)
    missing = []
    for name in expected:
        if name.endswith(("qkv_proj.weight", "gate_up_proj.weight")) and name not in loaded:  # stacked in the file: done
            shards = 3 if "qkv" in name else 2
            missing += [f"{name}[{i}]" for i in range(shards) if f"{name}#{i}" not in loaded]
        elif name not in loaded and not name.endswith("cos_sin"):
            missing.append(name)
    if missing:
        raise CheckpointError(f"{folder}: draft head is missing {len(missing)} tensors, e.g. {', '.join(missing[:3])}")

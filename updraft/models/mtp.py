"""Multi-token-prediction (MTP) draft heads: K modules in DeepSeek-V3's layout, over any decoder
layer with the ``LlamaDecoderLayer`` signature (``layer_factory(cfg, layer_id)``, ``forward(x,
residual, batch, rotary) -> (x, residual)``).

Module ``m`` (``m = 0..K-1``): ``h' = eh_proj(cat(enorm(embed(token)), hnorm(h)))`` -> one decoder
layer (KV layer ``m`` of the draft's pool) -> the output hidden (pre-norm residual stream: the
next module's ``h``), and logits ``shared_head.head(shared_head.norm(hidden))`` (the target's LM
head when the checkpoint has no ``shared_head.head``; the embedding likewise).

Semantics (positions as EAGLE's: draft KV position ``p`` holds what was computed from token
``t[p+1]``; ``N`` is a request's committed length, its last token the bonus):

* Every module reads, at draft position ``p``, the token ``t[p+1]``: one forward feeds the same
  input ids to every module. Module 0 reads the target's feature ``f[p]``, its last layer's
  output before the final norm (``updraft.spec.setup`` sets the target's ``aux_layers``);
  module ``m >= 1`` reads module ``m-1``'s output at ``p-1`` (pre-norm too). Module ``m``'s state at ``p`` is therefore DeepSeek's
  module ``m+1`` at sequence position ``p-m`` (``h_i^k = M_k(h_i^{k-1}, emb(t[i+k]))``), inputs
  alike; its rotary position is ``p`` instead of ``p-m``, an offset every entry of module ``m``
  shares, which relative attention cannot see.
* Extend (prefill chunks, catch-up, the draft extend v1 over the accepted tokens and v2 over all
  S+1 rows): ONE forward runs every module over the same positions ``s..e``. Module ``m >= 1``'s
  feature rows are module ``m-1``'s outputs shifted down one row inside each request; the
  request's first row takes ``layer_states[row, m-1]``: module ``m-1``'s output at ``s-1`` that
  the previous extend kept (zero when ``s = 0``: nothing precedes the sequence). The forward
  returns, in ``ModelOutput.aux_hidden``, modules ``0..K-2``'s outputs at the logits rows (the
  last valid row: the last token, or v2's accepted row ``a-1``); the caller stores them with
  ``keep_layer_states`` (from the output of the path that RAN: failure class 2). So after every
  extend each module's KV is exact (DeepSeek's states) at every position ``<= N-2``.
* Chain: the first draft ``d_1`` is module 0's prediction at the last extend row (``N-2``).
  Step ``j`` (``1..S-1``) runs module ``j mod K`` on ``d_j`` and the hidden step ``j-1``
  produced, at KV position ``N-2+ceil(j/K)`` (each module's next free position: module ``m``'s
  first use writes ``N-1``, right after its exact entries, so no step reads a KV entry that
  neither this chain nor an extend wrote) and rotary position ``N-2+j`` (its distance to every
  exact entry is the one the exact computation has). Left out against the exact computation:
  module ``m``'s states at the positions in between (module ``m`` over the earlier drafts), which
  would cost ``j`` rows at step ``j``. For K = 1 this is EAGLE's chain; for S <= 2 it is exact.
  The next extend rewrites every module's positions ``>= N-1`` before anything reads them.
* Cycling (S > K): step ``j`` reuses module ``j mod K``, which then reads a deeper module's
  output than it was trained on (how every engine runs DeepSeek-V3's one module with S > 1).
  Allowed unless the head's config says ``"mtp_cycle": false`` (``updraft.spec.setup`` checks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from updraft import ops
from updraft.batch import CaptureHidden, FeatureKind, ForwardBatch
from updraft.models.config import ModelConfig
from updraft.models.eagle import _SharedWeights
from updraft.models.layers import Linear, RMSNorm, RotaryEmbedding
from updraft.models.llama import ModelOutput, finish_residual

#: ``layer_factory(cfg, layer_id)``: the decoder layer a module wraps. ``layer_id`` is the module's
#: KV layer in the draft's own pool (0..K-1), not its checkpoint index (``start_layer + m``): a
#: family whose layer kind depends on the index (DeepSeek's MoE layers) decides it itself.
LayerFactory = Callable[[ModelConfig, int], nn.Module]


@dataclass(frozen=True)
class MtpHeadConfig:
    """What a loaded MTP head is: the modules' layer shape (``model.num_layers`` = modules
    loaded, ``min(K, S)``), how many the checkpoint has and where they start in it."""

    model: ModelConfig
    num_modules: int  # K in the checkpoint (num_nextn_predict_layers)
    start_layer: int  # checkpoint layer index of module 0 (model.layers.{start + m}.*)
    cycle: bool  # whether S > K may reuse modules (j mod K)


@dataclass(frozen=True)
class ChainStep:
    """Where chain step ``j`` of a draft model runs: ``offset`` KV positions past the first
    draft's (``d_1`` came from position ``N-2``), its forward marked ``draft_step = key``
    (0: every step runs alike, one DRAFT_DECODE graph serves them all)."""

    offset: int
    key: int


def chain_step(model: nn.Module, j: int) -> ChainStep:
    """Chain step ``j`` (``1..S-1``) of ``model``: an MTP head's own plan, else EAGLE's (one
    position per step, all steps alike)."""
    if isinstance(model, MtpHead):
        return model.chain_step(j)
    return ChainStep(j, 0)


class SharedHead(nn.Module):
    """A module's final norm and, when the checkpoint has one, its own LM head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head: nn.Linear | None = None  # made by the loader when the checkpoint has the tensor


class MtpModule(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, layer_factory: LayerFactory) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.enorm = RMSNorm(h, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(h, cfg.rms_norm_eps)
        self.eh_proj = Linear(2 * h, h, bias=False)
        self.block = layer_factory(cfg, layer_id)
        self.shared_head = SharedHead(cfg)

    def forward(self, emb: torch.Tensor, hidden: torch.Tensor, batch: ForwardBatch, rotary: nn.Module) -> torch.Tensor:
        """The module's output hidden (pre-norm) for every row. ``hidden`` is not modified (it
        may be a graph's static input)."""
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hidden.to(emb.dtype))], dim=-1))
        x, residual = self.block(x, None, batch, rotary)
        return finish_residual(x, residual)


def default_rotary(cfg: ModelConfig) -> nn.Module:
    return RotaryEmbedding(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)


class MtpHead(nn.Module):
    """K MTP modules as one draft model (see the module docstring for the semantics)."""

    def __init__(self, hc: MtpHeadConfig, layer_factory: LayerFactory,
                 rotary_factory: Callable[[ModelConfig], nn.Module] = default_rotary) -> None:
        super().__init__()
        cfg = hc.model
        self.head_config = hc
        self.config = cfg
        self.shared = _SharedWeights()
        self.layers = nn.ModuleList(MtpModule(cfg, m, layer_factory) for m in range(cfg.num_layers))
        self.rotary = rotary_factory(cfg)
        #: [rows, K-1, hidden]: per request-pool row, module m's output at the last position its
        #: last extend covered (``keep_layer_states``); None until ``alloc_layer_states``.
        self.layer_states: torch.Tensor | None
        self.register_buffer("layer_states", None, persistent=False)

    @property
    def num_layers(self) -> int:
        """Modules in use (``min(K, S)``: modules past S never run)."""
        return len(self.layers)

    @property
    def draft_vocab_size(self) -> int:
        return self.config.vocab_size

    def chain_step(self, j: int) -> ChainStep:
        k = self.num_layers
        return ChainStep(-(-j // k), j if k > 1 else 0)

    # ---- per-request module states ----------------------------------------------------------
    def alloc_layer_states(self, rows: int) -> None:
        """Room for ``rows`` request-pool rows (before any graph capture: graphs read it)."""
        w = self.eh_proj_weight()
        n = self.num_layers - 1
        self.layer_states = torch.zeros(rows, n, self.config.hidden_size, dtype=w.dtype, device=w.device) if n else None

    def keep_layer_states(self, rows: torch.Tensor, states: torch.Tensor | None) -> None:
        """After an extend: ``states`` [len(rows), (K-1) * hidden] is its ``aux_hidden`` (modules
        0..K-2 at each request's last valid row), taken from the path that ran."""
        if self.layer_states is None:
            return
        if states is None:
            raise ValueError("a multi-module MTP extend returned no module states (aux_hidden)")
        self.layer_states[rows] = states.view(len(rows), self.num_layers - 1, -1).to(self.layer_states.dtype)

    def clear_padding_row(self) -> None:
        """Zero request-pool row 0 (graph padding rows write there)."""
        if self.layer_states is not None:
            self.layer_states[:1].zero_()

    def eh_proj_weight(self) -> torch.Tensor:
        return self.layers[0].eh_proj.weight

    # ---- forward --------------------------------------------------------------------------
    def _logits(self, m: int, rows: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        """Module ``m``'s logits of its output rows."""
        return self._normed_logits(m, self.layers[m].shared_head.norm(rows), fp32)

    def _normed_logits(self, m: int, normed: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        """Module ``m``'s logits of rows its head's norm already took."""
        head = self.layers[m].shared_head
        w = head.head.weight if head.head is not None else self.shared.lm_head_weight()
        logits = ops.dense(normed, w)
        return logits.float() if fp32 else logits

    def logits_from_feature(self, feat: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        """The first draft's logits from module 0's output rows ``feat`` (float32, or the model's
        dtype with ``fp32`` off)."""
        return self._logits(0, feat, fp32)

    @property
    def first_norm(self) -> RMSNorm:
        """The norm ``logits_from_feature`` applies before the LM head (see ``Eagle3Head.first_norm``)."""
        return self.layers[0].shared_head.norm

    def logits_from_normed(self, normed: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        """``logits_from_feature`` of rows whose ``first_norm`` is ``normed``."""
        return self._normed_logits(0, normed, fp32)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids

    @torch.no_grad()
    def forward(self, batch: ForwardBatch) -> ModelOutput:
        if batch.feature is None or batch.feature_kind not in (FeatureKind.TARGET, FeatureKind.DRAFT):
            raise ValueError(f"an MTP head needs a target or draft feature, got {batch.feature_kind.name}")
        emb = self.shared.embed(batch.input_ids)
        full = batch.capture_hidden == CaptureHidden.FULL
        if batch.feature_kind == FeatureKind.DRAFT:
            return self._step(emb, batch, full)
        outs = self._extend(emb, batch)
        aux = torch.cat(outs[:-1], dim=-1) if len(outs) > 1 else None
        sel = batch.logit_rows(outs[0])
        return ModelOutput(
            logits=self._logits(0, sel, batch.fp32_logits),
            hidden=outs[0] if full else sel,
            aux_hidden=None if aux is None else (aux if full else batch.logit_rows(aux)),
        )

    def _extend(self, emb: torch.Tensor, batch: ForwardBatch) -> list[torch.Tensor]:
        """Every module over the batch's positions; module m reads module m-1's outputs one row
        down inside each request, the first row from ``layer_states`` (zero at position 0)."""
        assert batch.feature is not None
        outs = [self.layers[0](emb, batch.feature, batch, self.rotary)]
        if self.num_layers > 1:
            if self.layer_states is None:
                raise ValueError("MtpHead.alloc_layer_states was not called (the extend needs the module states)")
            first = batch.extend_start_loc.long()
            # prefix 0 (a sequence's first row) or negative (padded graph rows): no earlier state
            start = ((batch.seq_lens - batch.extend_seq_lens) > 0)[:, None]
            carried = self.layer_states[batch.req_pool_indices.long()]  # [B, K-1, H]
            for m in range(1, self.num_layers):
                shifted = torch.roll(outs[-1], 1, dims=0)
                shifted.index_copy_(0, first, torch.where(start, carried[:, m - 1], 0).to(shifted.dtype))
                outs.append(self.layers[m](emb, shifted, batch, self.rotary))
        return outs

    def _step(self, emb: torch.Tensor, batch: ForwardBatch, full: bool) -> ModelOutput:
        """Chain step ``batch.draft_step``: module ``j mod K`` at rotary position ``N-2+j`` (its KV
        position, ``N-2+ceil(j/K)``, is what the batch's positions say)."""
        assert batch.feature is not None
        j = batch.draft_step
        m = j % self.num_layers
        delta = j - self.chain_step(j).offset
        b = dataclasses.replace(batch, positions=batch.positions + delta) if delta else batch
        out = self.layers[m](emb, batch.feature, b, self.rotary)
        sel = batch.logit_rows(out)
        return ModelOutput(logits=self._logits(m, sel, batch.fp32_logits), hidden=out if full else sel)

"""The Llama family (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, SmolLM) in plain PyTorch.

Differences inside the family are configuration: QKV bias (Qwen2), per-head q/k RMSNorm
(Qwen3), GQA/MQA head counts, tied or untied LM head, RoPE scaling (llama3, linear).
Weights use Hugging Face names, except that q/k/v and gate/up are fused; ``load_weights`` maps
checkpoint names onto the fused parameters.

Residual stream (SGLang style): a decoder layer takes and returns ``(x, residual)`` where the
layer's true output is ``x + residual``. That sum is never materialised on its own: the next
layer's input norm (or the final norm) computes it in the same kernel as the normalisation
(``RMSNorm.forward_add``), and the post-attention norm likewise absorbs the attention residual
add. On the torch path (CPU) values are bitwise those of the unfused
``x = x + attn(norm(x)); x = x + mlp(norm(x))`` (tests/ops/test_ops.py checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from updraft import ops
from updraft.attention.base import Rope
from updraft.batch import CaptureHidden, ForwardBatch, ForwardMode
from updraft.models import fused
from updraft.models.config import ModelConfig
from updraft.models.layers import GatedMLP, Linear, MergedLinear, RMSNorm, RotaryEmbedding

if TYPE_CHECKING:
    from updraft.ops.gemv import NormedRows


@dataclass
class ModelOutput:
    """``logits`` [R, V] for the rows in ``batch.logits_indices`` (float32, or the model's dtype
    where ``batch.fp32_logits`` is off; None where ``head_rows`` holds the LM head's input
    instead); ``hidden`` the final (normed) hidden states of those rows (CaptureHidden.LAST) or
    of every row (FULL);
    ``aux_hidden`` the concatenated outputs of the captured layers (EAGLE-3), same rows as
    ``hidden``."""

    logits: torch.Tensor | None
    hidden: torch.Tensor | None = None
    aux_hidden: torch.Tensor | None = None
    graph: bool = False  # produced by a graph replay (views into static buffers)
    #: ``logits.argmax(-1)`` where the LM head computed it in the same launch (small-M path).
    argmax: torch.Tensor | None = None
    #: Set where the batch allowed unscaled logits (``ForwardBatch.unscaled_logits``) and the
    #: model left each row's positive factor out: the logits are ``logits * row_scale.factor()``.
    row_scale: RowScale | None = None
    #: Set where the batch allowed it (``ForwardBatch.head_rows``) and the model took it: the LM
    #: head's input rows [R, H] (left unscaled as ``row_scale`` says), and ``logits`` is None.
    head_rows: torch.Tensor | None = None


@dataclass(frozen=True)
class RowScale:
    """Each logits row's positive factor ``rsqrt(sum(sumsq[r]) / width + eps)``: the final
    RMSNorm's 1 / rms of the row, from the partial sums of squares its producer wrote
    (``NormedRows.sumsq`` [R, P] float32)."""

    sumsq: torch.Tensor
    width: int
    eps: float

    def factor(self) -> torch.Tensor:
        """[R] float32 (torch ops: the reference; kernels reduce ``sumsq`` themselves)."""
        return torch.rsqrt(self.sumsq.sum(-1) / self.width + self.eps)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, in_features: int | None = None) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.q_size = cfg.q_size
        self.kv_size = cfg.kv_size
        # EAGLE-3's draft layer attends over concat(embedding, hidden): in_features = 2 * hidden.
        self.qkv_proj = MergedLinear(
            in_features or cfg.hidden_size, [cfg.q_size, cfg.kv_size, cfg.kv_size], bias=cfg.qkv_bias
        )
        self.o_proj = Linear(cfg.q_size, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        # The small-M GEMMs the fused path launches (``ops.FusedPolicy``): the QKV kernel with
        # RoPE and the KV store, or (q/k norm) a plain one; o_proj. A backend without the fused KV
        # store (flex) also takes the plain QKV GEMM, which this does not name.
        qkv_n, qkv_k = self.qkv_proj.out_features, self.qkv_proj.in_features
        self.gemms: tuple[ops.Gemm, ...] = (
            ("linear", qkv_n, qkv_k, 0) if cfg.qk_norm else ("qkv", qkv_n, qkv_k, cfg.head_dim),
            ("linear", self.o_proj.out_features, self.o_proj.in_features, 0),
        )

    def forward(
        self, x: torch.Tensor, batch: ForwardBatch, rotary: RotaryEmbedding
    ) -> torch.Tensor:
        if ops.small_m(x, self.gemms):
            return fused.attention(self, x, fused.no_prologue(), batch, rotary)[0]
        return self.o_proj(self.attend(self.qkv_proj(x), batch, rotary))

    def split_heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [T, Hq, D], k, v [T, Hkv, D]: strided views into the QKV output (no copies)."""
        t = qkv.shape[0]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        return (q.reshape(t, self.num_heads, self.head_dim), k.reshape(t, self.num_kv_heads, self.head_dim),
                v.reshape(t, self.num_kv_heads, self.head_dim))

    def attend(self, qkv: torch.Tensor, batch: ForwardBatch, rotary: RotaryEmbedding) -> torch.Tensor:
        """Attention output [T, q_size] of the QKV projection output: q/k norm (Qwen3), then the
        backend's RoPE (in place: it may fuse it with the KV store), store and attention."""
        q, k, v = self.split_heads(qkv)
        if self.q_norm is not None and self.k_norm is not None:
            q = self.q_norm(q)
            k = self.k_norm(k)
        assert batch.attn_backend is not None, "ForwardBatch.attn_backend must be set"
        out = batch.attn_backend.forward(q, k, v, self.layer_id, batch, rope=Rope(batch.positions, rotary.cos_sin))
        return out.reshape(qkv.shape[0], self.q_size)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(cfg, layer_id)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        # An EAGLE-1 head replaces layer 0's input norm by nn.Identity (its checkpoints have none).
        self.input_layernorm: RMSNorm | nn.Identity = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.gemms: tuple[ops.Gemm, ...] = self.self_attn.gemms + self.mlp.gemms

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        batch: ForwardBatch,
        rotary: RotaryEmbedding,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer on the residual stream ``x + residual`` (``residual=None``: the stream is
        ``x`` alone, e.g. the embeddings). Returns ``(mlp_out, residual)``: the layer's output is
        their sum, left for the next norm to fuse (``finish_residual`` where none follows)."""
        if ops.small_m(x, self.gemms):
            return fused.decoder_layer(self, x, residual, batch, rotary)
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        elif isinstance(self.input_layernorm, RMSNorm):
            x, residual = self.input_layernorm.forward_add(x, residual)
        else:  # no input norm, yet a residual pending (an Identity layer after another layer)
            residual = x + residual
            x = residual
        x = self.self_attn(x, batch, rotary)
        x, residual = self.post_attention_layernorm.forward_add(x, residual)
        return self.mlp(x), residual


def finish_residual(x: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    """The residual stream ``x + residual`` as one tensor (where no norm follows to fuse it)."""
    return x if residual is None else x + residual


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DecoderLM(nn.Module):
    """What every causal LM here shares: embedding, a stack of decoder layers on the residual
    stream, final norm, LM head, EAGLE-3 capture. A subclass builds ``config``, ``model`` (with
    ``embed_tokens``, ``layers``, ``norm``), ``rotary`` and ``lm_head`` (None: tied); each layer
    is called as ``layer(x, residual, batch, rotary) -> (x, residual)``."""

    config: ModelConfig
    model: nn.Module
    rotary: RotaryEmbedding
    lm_head: nn.Linear | None

    def __init__(self) -> None:
        super().__init__()
        #: Layer ids whose outputs are captured for EAGLE-3 (empty: none).
        self.aux_layers: tuple[int, ...] = ()

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def compute_logits(self, hidden: torch.Tensor, fp32: bool = True) -> torch.Tensor:
        logits = ops.dense(hidden, self.lm_head_weight)
        return logits.float() if fp32 else logits

    @torch.no_grad()
    def forward(self, batch: ForwardBatch, aux_ready: Callable[[torch.Tensor], None] | None = None) -> ModelOutput:
        """``aux_ready``: called once with the EAGLE-3 features (``ModelOutput.aux_hidden``) as soon
        as they are final: where the fused layers write them in place, right after the last
        captured layer, before the layers after it run (the fused iteration forks a side stream
        there); else after the last layer. Not called without captured layers."""
        once = _Once(aux_ready) if aux_ready is not None else None
        if batch.mode != ForwardMode.TARGET_VERIFY:
            return self._forward(batch, once)
        # where the fused layers pay differs for a verify block (ops.FusedPolicy.for_verify)
        with ops.use_fused_policy(ops.fused_policy().for_verify()):
            return self._forward(batch, once)

    def _forward(self, batch: ForwardBatch, aux_ready: _Once | None = None) -> ModelOutput:
        table = self.model.embed_tokens.weight
        # Small-M: layer 0's QKV kernel gathers the embedding rows itself (no separate lookup).
        first = self.model.layers[0] if len(self.model.layers) else None
        small = (isinstance(first, LlamaDecoderLayer)  # the fused layer is Llama's
                 and ops.small_m_rows(batch.num_tokens, table.dtype, table.device, table.shape[1], first.gemms))
        # A verify's EAGLE-3 features: the fused layers write the captured streams straight into
        # their column blocks (no concatenation kernel) where the ids are distinct
        aux_buf = None
        if (small and batch.capture_hidden == CaptureHidden.FULL and self.aux_layers
                and len(set(self.aux_layers)) == len(self.aux_layers)):
            aux_buf = table.new_empty(batch.num_tokens, len(self.aux_layers) * table.shape[1])
        h, residual, captured = self._layers(table if small else self.embed(batch.input_ids), batch, small, aux_buf,
                                             aux_ready if batch.capture_hidden == CaptureHidden.FULL else None)
        aux = [captured[i] for i in self.aux_layers]  # ids may repeat on very shallow targets
        head = ("linear", self.lm_head_weight.shape[0], self.lm_head_weight.shape[1], 0)
        if (batch.capture_hidden == CaptureHidden.NONE and ops.small_m(h, (head,))
                and fused.lm_head_ok(h, residual, self.model.norm, self.lm_head_weight, batch.logits_indices)):
            logits, best = fused.norm_lm_head(h, residual, self.model.norm, self.lm_head_weight, batch.logits_indices)
            return ModelOutput(logits=logits, argmax=best)
        h = self.model.norm(h) if residual is None else self.model.norm.forward_add(h, residual)[0]
        rows = batch.logit_rows(h)
        logits = (self.compute_logits(rows, batch.fp32_logits) if batch.logits_indices.numel()
                  else rows.new_zeros(0, self.config.vocab_size).float())
        out = ModelOutput(logits=logits)
        if batch.capture_hidden == CaptureHidden.LAST:
            out.hidden = rows
            if aux:
                out.aux_hidden = batch.logit_rows(torch.cat(aux, dim=-1))
        elif batch.capture_hidden == CaptureHidden.FULL:
            out.hidden = h
            if aux_buf is not None and _in_place(aux_buf, aux):
                out.aux_hidden = aux_buf  # every captured stream was written in place
            elif aux:
                out.aux_hidden = torch.cat(aux, dim=-1)
        if aux_ready is not None and out.aux_hidden is not None:
            aux_ready(out.aux_hidden)  # nothing if the layers already handed them over
        return out

    def _layers(self, h: torch.Tensor, batch: ForwardBatch, small: bool, aux_buf: torch.Tensor | None = None,
                aux_ready: _Once | None = None) -> tuple[torch.Tensor, torch.Tensor | None, dict[int, torch.Tensor]]:
        """The decoder stack on the residual stream: ``(x, residual, captured layer outputs)``.
        ``small``: ``h`` is the embedding table and layer 0 gathers its rows; a fused layer
        followed by another hands it ``NormedRows`` (its down projection adds the residual and
        prepares the next input norm), so no layer's QKV makes a pass over its rows for the norm.
        ``aux_buf`` [T, len(aux_layers) * hidden]: such a layer that is captured writes its stream
        into its column block (the next layer reads it there); once the last of them has, where
        every one did, ``aux_ready`` gets ``aux_buf``."""
        residual: torch.Tensor | None = None
        normed: NormedRows | None = None  # set: the stream is here, ``h`` and ``residual`` are stale
        captured: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.model.layers):
            if normed is not None or (small and i == 0):
                ids = batch.input_ids if i == 0 else None
                nxt = self._next_fused_norm(i, batch.num_tokens, h)
                if nxt is not None:
                    into = None
                    if aux_buf is not None and i in self.aux_layers:
                        j, w = self.aux_layers.index(i), aux_buf.shape[1] // len(self.aux_layers)
                        into = aux_buf[:, j * w : (j + 1) * w]
                    normed = fused.decoder_layer_normed(layer, h, residual, batch, self.rotary, nxt, ids, normed, into)
                else:
                    h, residual = fused.decoder_layer(layer, h, residual, batch, self.rotary, ids, normed)
                    normed = None
            else:
                h, residual = layer(h, residual, batch, self.rotary)
            if i in self.aux_layers:
                # The output of layer i, materialised only for the captured layers (an extra add
                # each unless the fused stream already holds it): the sum the next norm computes.
                captured[i] = normed.stream if normed is not None else finish_residual(h, residual)
                if (aux_ready is not None and aux_buf is not None and i == max(self.aux_layers)
                        and _in_place(aux_buf, [captured[j] for j in self.aux_layers])):
                    aux_ready(aux_buf)
        return h, residual, captured

    def _next_fused_norm(self, i: int, rows: int, like: torch.Tensor) -> RMSNorm | None:
        """The input norm of layer ``i + 1`` where that layer takes the fused path (``like``: the
        activations' dtype, device and width)."""
        layers = self.model.layers
        if i + 1 >= len(layers):
            return None
        nxt = layers[i + 1]
        if not (isinstance(nxt, LlamaDecoderLayer) and isinstance(nxt.input_layernorm, RMSNorm)):
            return None
        return nxt.input_layernorm if ops.small_m_rows(rows, like.dtype, like.device, like.shape[-1], nxt.gemms) else None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load Hugging Face-named tensors; every parameter must be covered exactly once."""
        raise NotImplementedError

    def post_load(self, max_positions: int | None = None) -> None:
        """Build non-persistent buffers (RoPE table) on the weights' device and dtype."""
        w = self.model.embed_tokens.weight
        self.rotary.build(w.device, w.dtype, max_positions)


def _in_place(aux_buf: torch.Tensor, aux: list[torch.Tensor]) -> bool:
    """Whether every captured stream ``aux`` lies in its column block of ``aux_buf``."""
    w = aux_buf.shape[1] // max(1, len(aux))
    return all(a.data_ptr() == aux_buf[:, j * w :].data_ptr() for j, a in enumerate(aux))


class _Once:
    """``fn`` called at most once, at the first call."""

    def __init__(self, fn: Callable[[torch.Tensor], None]) -> None:
        self.fn: Callable[[torch.Tensor], None] | None = fn

    def __call__(self, x: torch.Tensor) -> None:
        fn, self.fn = self.fn, None
        if fn is not None:
            fn(x)


class LlamaForCausalLM(DecoderLM):
    """Causal LM over a paged KV cache; one forward per ``ForwardBatch``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    # ---- weights ---------------------------------------------------------------------------
    _FUSED = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load Hugging Face-named tensors; every parameter must be covered exactly once."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if name == "lm_head.weight" and self.lm_head is None:
                continue  # tied: some checkpoints still store a copy
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2] in self._FUSED:
                fused, shard = self._FUSED[parts[-2]]
                module_name = ".".join(parts[:-2] + [fused])
                module = self.get_submodule(module_name)
                assert isinstance(module, MergedLinear)
                module.load_shard(shard, parts[-1], tensor)
                loaded.add(f"{module_name}.{parts[-1]}#{shard}")
                continue
            if name not in params:
                raise ValueError(f"checkpoint tensor {name!r} has no place in {self.config.architecture}")
            p = params[name]
            if tuple(p.shape) != tuple(tensor.shape):
                raise ValueError(f"{name}: expected shape {tuple(p.shape)}, checkpoint has {tuple(tensor.shape)}")
            with torch.no_grad():
                p.copy_(tensor)
            loaded.add(name)
        missing = []
        for name, module in self.named_modules():
            if isinstance(module, MergedLinear):
                for pname in ("weight", "bias"):
                    if getattr(module, pname) is None:
                        continue
                    for shard in range(len(module.shard_sizes)):
                        if f"{name}.{pname}#{shard}" not in loaded:
                            missing.append(f"{name}.{pname}[{shard}]")
        for name in params:
            if not any(name.startswith(m) for m in self._merged_prefixes()) and name not in loaded:
                missing.append(name)
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise ValueError(f"checkpoint is missing {len(missing)} tensors: {shown}")

    def _merged_prefixes(self) -> list[str]:
        return [n + "." for n, m in self.named_modules() if isinstance(m, MergedLinear)]

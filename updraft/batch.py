"""Forward modes and the forward batch: what one model forward sees.

Conventions (see ../shared/design/spec-decoding.md):

* Tokens of a forward are packed request-major. Request ``i`` owns rows
  ``[extend_start_loc[i], extend_start_loc[i] + extend_seq_lens[i])`` of ``input_ids``,
  ``positions`` and ``out_cache_loc``. In the fixed-stride modes (DECODE, DRAFT_DECODE,
  TARGET_VERIFY, DRAFT_EXTEND_V2) every request has the same number of rows, ``stride``, so
  ``extend_start_loc[i] == i * stride`` and capture and replay cannot disagree on the layout.
* ``seq_lens[i]`` is, in EVERY mode, the KV length of request ``i`` that is visible once this
  forward's tokens are written: cached prefix + new tokens. ``extend_seq_lens[i]`` is the number
  of new tokens. A backend that reads the prefix from the pool and the new K/V separately uses
  ``kv_lens = clamp(seq_lens - extend_seq_lens, min=0)``; the clamp matters for padded graph rows,
  where ``seq_lens`` is the backend's fill value and ``extend_seq_lens`` the captured width.
* Positions of request ``i`` run from ``seq_lens[i] - extend_seq_lens[i]`` upwards.
* KV slots: ``req_to_token[req_pool_indices[i], p]`` is the pool slot of position ``p``. Rows of
  the table are written when slots are allocated, so ``out_cache_loc`` is simply the table read
  at the new positions. Row 0 of the table is all zeros and slot 0 is a scratch slot: padded
  graph rows read and write there and nowhere else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

if TYPE_CHECKING:
    from updraft.attention.base import AttentionBackend


class ForwardMode(enum.IntEnum):
    """What a forward computes. Speculative modes are produced by ``updraft.spec``."""

    EXTEND = 1  # prefill / chunked prefill: new prompt tokens on top of a cached prefix
    DECODE = 2  # one new token per request (target model, no speculation)
    TARGET_VERIFY = 3  # the target over bonus + drafts, fixed stride ndt, causal in the block
    DRAFT_DECODE = 4  # one draft step: topk queries per request
    DRAFT_EXTEND = 5  # v1: the draft over the accepted tokens only, packed, variable length
    DRAFT_EXTEND_V2 = 6  # v2: the draft over all ndt positions at the fixed stride
    IDLE = 7  # no tokens (keeps collective / graph bookkeeping uniform)

    # Every predicate that could include DRAFT_EXTEND_V2 takes ``include_v2`` with no default:
    # a predicate that silently excluded V2 routed it to the wrong kernel in production
    # (failure class 3).

    def is_draft_extend(self, *, include_v2: bool) -> bool:
        if self == ForwardMode.DRAFT_EXTEND:
            return True
        return include_v2 and self == ForwardMode.DRAFT_EXTEND_V2

    def is_extend_like(self, *, include_v2: bool) -> bool:
        """Modes whose new tokens attend causally to a prefix plus each other (extend kernels)."""
        if self in (ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND):
            return True
        return include_v2 and self == ForwardMode.DRAFT_EXTEND_V2

    def is_fixed_stride(self, *, include_v2: bool) -> bool:
        """Modes where every request has the same number of rows (graph-capturable layouts)."""
        if self in (ForwardMode.DECODE, ForwardMode.DRAFT_DECODE, ForwardMode.TARGET_VERIFY):
            return True
        return include_v2 and self == ForwardMode.DRAFT_EXTEND_V2

    def is_decode(self) -> bool:
        """One token per request attending to the whole cache (target or draft)."""
        return self in (ForwardMode.DECODE, ForwardMode.DRAFT_DECODE)

    def is_target_verify(self) -> bool:
        return self == ForwardMode.TARGET_VERIFY

    def is_idle(self) -> bool:
        return self == ForwardMode.IDLE

    def is_draft(self, *, include_v2: bool) -> bool:
        return self == ForwardMode.DRAFT_DECODE or self.is_draft_extend(include_v2=include_v2)


#: Every mode that runs tokens through a model (all but IDLE), in a stable order.
REAL_MODES: tuple[ForwardMode, ...] = (
    ForwardMode.EXTEND,
    ForwardMode.DECODE,
    ForwardMode.TARGET_VERIFY,
    ForwardMode.DRAFT_DECODE,
    ForwardMode.DRAFT_EXTEND,
    ForwardMode.DRAFT_EXTEND_V2,
)


#: Which rows of a forward get logits: the last row of each request, every row, one chosen row
#: per request (graph replays of the v2 draft extend), or none.
LogitRows = Literal["last", "all", "select", "none"]


class FeatureKind(enum.IntEnum):
    """What ``ForwardBatch.feature`` holds (the extra per-token input of a draft model)."""

    NONE = 0
    TARGET = 1  # the target's hidden states (EAGLE heads project them with their fc)
    DRAFT = 2  # the draft's own output feature of the previous step (draft decode)
    PROBE = 3  # packed q|k|v rows of the attention kit's one-layer probe model
    #: the target's hidden states already through an EAGLE-3 head's fc (``Eagle3Head.project_target``;
    #: the fused iteration projects them on a side stream beside the verify's last layers)
    PROJECTED = 4


class CaptureHidden(enum.IntEnum):
    """Which hidden states the model returns besides logits (speculative drafts need them)."""

    NONE = 0
    LAST = 1  # the rows whose logits are computed
    FULL = 2  # every token row


@dataclass
class ForwardBatch:
    """Everything one forward needs, on the model's device.

    Tensor shapes: ``B = batch_size`` requests and ``T = num_tokens`` token rows.

    - ``input_ids`` [T] int64, ``positions`` [T] int64, ``out_cache_loc`` [T] int64.
    - ``req_pool_indices`` [B] int64: rows of ``req_to_token``.
    - ``seq_lens`` [B] int32: KV length visible once this forward's tokens are written (prefix +
      new tokens), in every mode.
    - ``extend_seq_lens`` [B] int32: new tokens per request (1 in DECODE; ``stride`` in the
      fixed-stride modes; the accepted count in DRAFT_EXTEND v1).
    - ``extend_start_loc`` [B] int32: first row of each request (exclusive cumsum).
    - ``seq_lens_cpu`` / ``extend_seq_lens_cpu``: host copies, so metadata can be built without a
      device sync. Graph replay never reads them for kernel arguments (they are frozen at capture).
    - ``logits_indices`` [B or T] int64: rows whose logits are wanted (last row per request in
      EXTEND; all rows in TARGET_VERIFY and DRAFT_EXTEND_V2).
    - ``custom_mask``: optional [B, stride, stride] bool tree mask over the draft block
      (True = may attend), for tree verification.
    - ``attn_backend`` and ``attn_metadata``: the backend that serves this forward and the
      metadata it built for it (``AttentionBackend.init_forward_metadata``).
    """

    mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor
    positions: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    extend_seq_lens: torch.Tensor
    extend_start_loc: torch.Tensor
    out_cache_loc: torch.Tensor
    seq_lens_cpu: torch.Tensor
    extend_seq_lens_cpu: torch.Tensor
    logits_indices: torch.Tensor
    stride: int = 0  # rows per request in fixed-stride modes, 0 otherwise
    # Graph replay pads a batch to a captured size: rows >= real_batch_size are padding (seq_lens =
    # the backend's fill value, extend = stride, req_pool_indices = 0). None: every row is real.
    real_batch_size: int | None = None
    # Tokens that belong to real requests (packed graph replays leave junk rows after them).
    num_real_tokens: int | None = None
    # A graph replay's view: the captured batch size whose static inputs hold this batch.
    replay_bs: int | None = None
    # Set by ModelRunner.make_batch: the batch's tensors live in the runner's inputs of this
    # mode until the next batch of the mode is staged (forward refuses a stale one).
    stage_serial: int | None = None
    # Bound on extend_seq_lens that sizes kernel grids. Graph runners set it to the captured
    # width so the host scalar is the same at capture and replay (failure class 6); None: the
    # backend uses the host maximum (eager).
    max_extend_len: int | None = None
    capture_hidden: CaptureHidden = CaptureHidden.NONE
    custom_mask: torch.Tensor | None = None
    attn_backend: AttentionBackend | None = None
    attn_metadata: Any = None
    # The extra per-token input of a draft model ([T, dim] rows, see FeatureKind).
    feature: torch.Tensor | None = None
    feature_kind: FeatureKind = FeatureKind.NONE
    # With a PROJECTED or DRAFT feature, or None: an EAGLE-3 head's mid-layer QKV product of it,
    # float32 [T, QKV width], computed apart (``Eagle3Head.feature_qkv_for``); the head's QKV launch
    # then streams only the embedding's weight columns and adds it.
    feature_qkv: torch.Tensor | None = None
    # Whether the logits come back as float32 (the default) or in the model's dtype: the fused
    # iteration's draft steps and greedy verify hand them to argmax / top-k kernels that widen as
    # they load, so the widening copy (a torch kernel after the LM head) is left out there.
    fp32_logits: bool = True
    # Whether the logits' reader applies each row's positive factor itself (the fused iteration's
    # draft steps: an argmax ignores it, the sampled draw's ``choose`` multiplies its candidates
    # by it): a model may then leave it out and report it (``ModelOutput.row_scale``). An EAGLE-3
    # head leaves out its final norm's 1 / rms, and with it the norm's launch: the down
    # projection's epilogue already writes the rows times the norm weight.
    unscaled_logits: bool = False
    # Whether a draft head may return its LM head's input rows (``ModelOutput.head_rows``) and no
    # logits: the fused iteration's greedy draft steps apply the head and its argmax in one pass
    # that never writes the logits (``updraft.spec.head_pick``).
    head_rows: bool = False
    # DRAFT_DECODE of a multi-layer draft (MTP): which chain step this forward is, so the model
    # runs that step's layer (``updraft.models.mtp``). 0 for every other forward and for drafts
    # whose steps are all alike. A graph bakes it in: part of PhaseSpec / BatchShape.
    draft_step: int = 0

    def set_feature(self, kind: FeatureKind, rows: torch.Tensor) -> None:
        self.feature, self.feature_kind = rows, kind

    def logit_rows(self, x: torch.Tensor) -> torch.Tensor:
        """``x[logits_indices]`` ([num_tokens, ...] -> the wanted rows), or ``x`` itself where every
        row is wanted: the indices are ascending and distinct in every mode, so as many of them
        as rows means all rows in order. Saves a gather kernel per forward in the draft chain,
        the verify and the v2 draft extend (the result may then alias ``x``)."""
        return x if self.logits_indices.numel() == x.shape[0] else x[self.logits_indices]

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def prefix_lens_cpu(self) -> torch.Tensor:
        """Cached prefix per request, clamped at 0 (padded graph rows go negative otherwise)."""
        return (self.seq_lens_cpu - self.extend_seq_lens_cpu).clamp(min=0)

    def check_conventions(self) -> None:
        """Assert the seq_lens convention on host copies. Called where metadata is built."""
        b = self.batch_size
        if self.seq_lens_cpu.shape[0] != b or self.extend_seq_lens_cpu.shape[0] != b:
            raise AssertionError(
                f"seq_lens_cpu/extend_seq_lens_cpu must have batch_size={b} rows, got "
                f"{tuple(self.seq_lens_cpu.shape)} / {tuple(self.extend_seq_lens_cpu.shape)}"
            )
        if self.mode.is_idle():
            return
        if bool((self.extend_seq_lens_cpu < 0).any()) or bool((self.seq_lens_cpu < 0).any()):
            raise AssertionError("seq_lens and extend_seq_lens must be >= 0")
        real = b if self.real_batch_size is None else self.real_batch_size
        if bool((self.seq_lens_cpu[:real] < self.extend_seq_lens_cpu[:real]).any()):
            raise AssertionError(
                "seq_lens must include this forward's new tokens (seq_lens >= extend_seq_lens): "
                f"seq_lens={self.seq_lens_cpu.tolist()} extend={self.extend_seq_lens_cpu.tolist()}"
            )
        total = int(self.extend_seq_lens_cpu.sum())
        if total != self.num_tokens and not (self.real_batch_size is not None and total <= self.num_tokens):
            raise AssertionError(f"sum(extend_seq_lens)={total} != num_tokens={self.num_tokens}")
        if self.max_extend_len is not None and b and int(self.extend_seq_lens_cpu.max()) > self.max_extend_len:
            raise AssertionError(f"extend length above max_extend_len={self.max_extend_len}")
        if self.mode.is_fixed_stride(include_v2=True):
            if self.stride <= 0 or bool((self.extend_seq_lens_cpu != self.stride).any()):
                raise AssertionError(
                    f"{self.mode.name} needs a fixed stride: stride={self.stride}, "
                    f"extend_seq_lens={self.extend_seq_lens_cpu.tolist()}"
                )
        if self.mode.is_decode() and self.stride != 1 and self.custom_mask is None:
            raise AssertionError(f"{self.mode.name} without a tree mask has stride 1")


def make_forward_batch(
    mode: ForwardMode,
    input_ids: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens_cpu: torch.Tensor,
    extend_seq_lens_cpu: torch.Tensor,
    req_to_token: torch.Tensor,
    *,
    logits: LogitRows = "last",
    stride: int = 0,
    capture_hidden: CaptureHidden = CaptureHidden.NONE,
    custom_mask: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> ForwardBatch:
    """Build a ForwardBatch from host lengths; derives positions, start locs and KV slots.

    ``logits``: "last" (last row of each request), "all" (every row) or "none".
    This is the eager path; graph runners fill static buffers with the same derivations.
    """
    device = input_ids.device
    seq_lens_cpu = seq_lens_cpu.to(torch.int32)
    extend_seq_lens_cpu = extend_seq_lens_cpu.to(torch.int32)
    bs = int(seq_lens_cpu.shape[0])
    start_cpu = torch.zeros(bs, dtype=torch.int32)
    if bs > 1:
        start_cpu[1:] = torch.cumsum(extend_seq_lens_cpu, 0)[:-1]
    seq_lens = seq_lens_cpu.to(device, non_blocking=True)
    ext = extend_seq_lens_cpu.to(device, non_blocking=True)
    start = start_cpu.to(device, non_blocking=True)
    num_tokens = int(input_ids.shape[0])
    # Row -> request and offset inside the request, built on device from lengths.
    req_of_row = torch.repeat_interleave(torch.arange(bs, device=device), ext.long(), output_size=num_tokens)
    offs = torch.arange(num_tokens, device=device) - start.long()[req_of_row]
    prefix = (seq_lens - ext).long()
    if positions is None:
        positions = prefix[req_of_row] + offs
    out_cache_loc = req_to_token[req_pool_indices.long()[req_of_row], prefix[req_of_row] + offs].long()
    if logits == "last":
        logits_indices = (start + ext - 1).long()
    elif logits == "all":
        logits_indices = torch.arange(num_tokens, device=device)
    elif logits == "none":
        logits_indices = torch.zeros(0, dtype=torch.long, device=device)
    else:
        raise ValueError(f"logits must be 'last', 'all' or 'none', got {logits!r}")
    return ForwardBatch(
        mode=mode,
        batch_size=bs,
        input_ids=input_ids,
        positions=positions,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        extend_seq_lens=ext,
        extend_start_loc=start,
        out_cache_loc=out_cache_loc,
        seq_lens_cpu=seq_lens_cpu,
        extend_seq_lens_cpu=extend_seq_lens_cpu,
        logits_indices=logits_indices,
        stride=stride,
        capture_hidden=capture_hidden,
        custom_mask=custom_mask,
    )

"""The attention backend interface.

A backend owns its metadata and its graph hooks. Metadata for a forward is built by ONE function
per backend, used for eager forwards, graph capture and graph replay, so the three cannot drift
(failure classes 1 and 6). The metadata object is attached to the batch (``batch.attn_metadata``):
per-step state travels with the batch, never in a global.

Life cycle:

* eager: ``init_forward_metadata(batch)`` then the model's layers call ``forward``;
* graphs: ``init_graph_state(max_bs, max_tokens_per_req)`` once; ``init_capture_metadata(batch)``
  before capturing a batch size (metadata lives in static buffers); before each replay
  ``init_replay_metadata(batch)`` copies new values INTO those buffers (never rebinding a tensor,
  never changing a host scalar the kernels took by value).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from updraft import ops
from updraft.batch import ForwardBatch, ForwardMode
from updraft.memory.pools import KVPool


@dataclass(frozen=True)
class Rope:
    """Rotary embedding still to apply to a forward's q and k (neox, in place): ``positions``
    [T] and the ``cos_sin`` [max_pos, D] table (``ops.rotary_``'s arguments). A backend may
    fuse it with its KV store."""

    positions: torch.Tensor
    cos_sin: torch.Tensor


@dataclass(frozen=True)
class SplitPartials:
    """A split-KV attention's outputs before their merge (``forward_stored_split``): ``mid_o``
    [T, H, S, D] float32, split ``s``'s output for row ``t`` and query head ``h`` normalised over
    its own keys; ``mid_lse`` [T, H, S] float32, log2 of its softmax denominator plus its running
    max, -inf where the split held no key (its ``mid_o`` then unspecified). The merged row is
    ``sum_s 2^lse_s mid_o_s / sum_s 2^lse_s`` (``gemv_merge`` folds it into the o_proj GEMV).
    The buffers are the backend's, rewritten by its next layer: consume them before that.
    ``pdl``: whether the launch merging them may launch with PDL (the backend's own merge
    launch's setting for this plan)."""

    mid_o: torch.Tensor
    mid_lse: torch.Tensor
    pdl: bool = True


class UnsupportedModeError(ValueError):
    """A backend was asked to run a forward mode it does not implement."""


class AttentionBackend(ABC):
    """Paged attention over a ``KVPool`` addressed through ``req_to_token``."""

    name: ClassVar[str] = "base"
    #: Forward modes this backend implements (eager).
    supported_modes: ClassVar[frozenset[ForwardMode]] = frozenset()
    #: Forward modes this backend can run inside a CUDA graph (a subset of supported_modes).
    graph_modes: ClassVar[frozenset[ForwardMode]] = frozenset()
    #: Devices this backend runs on ("cpu", "cuda").
    devices: ClassVar[frozenset[str]] = frozenset({"cpu", "cuda"})
    #: seq_lens value written into padded graph rows.
    fill_seq_len: ClassVar[int] = 1
    #: Whether the backend serves pools whose V is narrower than K or read from K's leading
    #: columns (``KVPool.v_head_dim`` / ``shared_kv``: MLA's latent cache).
    v_layouts: ClassVar[bool] = False
    #: Whether a model may write a forward's K/V into the pool itself (fused with the QKV
    #: projection) and then call ``forward_stored`` at no extra cost.
    stored_kv: ClassVar[bool] = False
    #: Whether the backend serves ordinary caches (K and V each in its own buffer, as wide as K).
    #: False for a backend of the shared latent cache only (``mla``).
    separate_kv: ClassVar[bool] = True

    def __init__(
        self,
        kv_pool: KVPool,
        req_to_token: torch.Tensor,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float | None = None,
    ) -> None:
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads}"
            )
        if not self.v_layouts and (kv_pool.shared_kv or kv_pool.v_head_dim != kv_pool.head_dim):
            raise ValueError(
                f"attention backend {self.name!r} needs V as wide as K in its own buffer; this model's "
                f"cache has v_head_dim={kv_pool.v_head_dim}, head_dim={kv_pool.head_dim}, "
                f"shared_kv={kv_pool.shared_kv} (use torch_native, or mla for MLA's shared latent cache)"
            )
        self.kv_pool = kv_pool
        self.req_to_token = req_to_token
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale if scale is not None else head_dim**-0.5

    # ---- capability checks -------------------------------------------------------------
    @classmethod
    def check_mode(cls, mode: ForwardMode) -> None:
        if mode not in cls.supported_modes:
            allowed = ", ".join(m.name for m in sorted(cls.supported_modes))
            raise UnsupportedModeError(
                f"attention backend {cls.name!r} does not support {mode.name}; it supports {allowed}"
            )

    @classmethod
    def check_device(cls, device: torch.device | str) -> None:
        kind = torch.device(device).type
        if kind not in cls.devices:
            raise ValueError(
                f"attention backend {cls.name!r} runs on {sorted(cls.devices)}, not on {kind!r}"
            )

    # ---- metadata ----------------------------------------------------------------------
    @abstractmethod
    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        """Eager forward: build metadata for ``batch`` and attach it as ``batch.attn_metadata``."""

    def init_graph_state(self, max_bs: int, max_tokens_per_req: int) -> None:
        """Allocate static metadata buffers for graphs of up to ``max_bs`` requests."""
        raise NotImplementedError(f"attention backend {self.name!r} does not support CUDA graphs")

    def init_capture_metadata(self, batch: ForwardBatch) -> None:
        """Graph capture: build metadata into the static buffers and attach it to ``batch``."""
        raise NotImplementedError(f"attention backend {self.name!r} does not support CUDA graphs")

    def init_replay_metadata(self, batch: ForwardBatch) -> None:
        """Graph replay: copy ``batch``'s values into the captured static buffers, in place."""
        raise NotImplementedError(f"attention backend {self.name!r} does not support CUDA graphs")

    # ---- compute -----------------------------------------------------------------------
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        *,
        save_kv: bool = True,
        rope: Rope | None = None,
    ) -> torch.Tensor:
        """Attention for the rows of ``batch``.

        ``q`` [T, num_heads, head_dim]; ``k``/``v`` [T, num_kv_heads, head_dim] are the new
        tokens' keys and values, written to ``batch.out_cache_loc`` of layer ``layer_id`` when
        ``save_kv``; ``rope``: rotate q and k first (in place). Returns [T, num_heads, v_head_dim]
        in ``q``'s dtype (``v``'s last dim is ``kv_pool.v_head_dim``; with a ``shared_kv`` pool
        ``v`` is ``k[..., :v_head_dim]`` and only ``k`` is stored).
        """
        if rope is not None:
            ops.rotary_(q, k, rope.positions, rope.cos_sin)
        return self._route(q, k, v, layer_id, batch, save_kv)

    def _route(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch,
               save_kv: bool) -> torch.Tensor:
        """The mode router (failure classes 3 and 5: DRAFT_EXTEND_V2 is extend-like, never decode)."""
        if batch.mode.is_decode() or batch.mode.is_target_verify():
            return self.forward_decode(q, k, v, layer_id, batch, save_kv=save_kv)
        if batch.mode.is_extend_like(include_v2=True):
            return self.forward_extend(q, k, v, layer_id, batch, save_kv=save_kv)
        raise UnsupportedModeError(f"attention has no path for {batch.mode.name}")

    def forward_stored(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch
    ) -> torch.Tensor:
        """Attention when this forward's K/V are already in the pool at ``batch.out_cache_loc``,
        rotated as ``q`` is (a fused projection kernel wrote them): what ``forward(..., rope=...)``
        computes after its own rotary and store. ``k``/``v`` hold the same rows. This default reads
        the new rows from ``k``/``v`` (``save_kv=False``); backends that read them from the pool
        override it."""
        return self._route(q, k, v, layer_id, batch, save_kv=False)

    def forward_stored_split(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, batch: ForwardBatch
    ) -> SplitPartials | None:
        """``forward_stored`` without its split merge where this backend's plan for ``batch``
        hands the merge to the caller (who folds it into the GEMM after the attention); None,
        with nothing launched, everywhere else: then call ``forward_stored``. Decided from host
        scalars only (graph-safe). This default never hands it over."""
        return None

    @abstractmethod
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        *,
        save_kv: bool = True,
    ) -> torch.Tensor:
        """EXTEND, DRAFT_EXTEND and DRAFT_EXTEND_V2: new tokens over a cached prefix."""

    @abstractmethod
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        *,
        save_kv: bool = True,
    ) -> torch.Tensor:
        """DECODE, DRAFT_DECODE and TARGET_VERIFY: queries over the whole cache."""

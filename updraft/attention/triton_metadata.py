"""The Triton backend's metadata (``triton_backend``'s docstring: what is frozen at capture and why).

``LaunchPlan``: the host scalars the kernels take by value; ``TritonMetadata``: the device
buffers of one forward plus its plan, shared by every layer (the MLA backend's too)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from updraft.attention.triton_kernels import TileConfig
from updraft.batch import ForwardMode

#: Upper bound on KV splits (the merge loads all splits of a row at once: keep it small).
MAX_KV_SPLITS = 64


def as_kernel_input(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` itself where the kernels can read it as it is (its dtype, contiguous), else a
    converted copy (batches built outside the runners' builders; eager only)."""
    return t if t.dtype == dtype and t.is_contiguous() else t.to(dtype).contiguous()


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype


@dataclass(frozen=True)
class LaunchPlan:
    """Host scalars the kernels take by value. Frozen at graph capture; see the module docstring."""

    mode: ForwardMode
    batch_size: int
    num_tokens: int
    stride: int  # rows per request in fixed-stride modes, 0 otherwise
    use_decode_kernel: bool
    tree_stride: int  # side of the [B, s, s] tree mask, 0 without one
    max_ext: int  # bound on extend_seq_lens: sizes the extend grid (== stride when fixed)
    num_kv_splits: int
    tile: TileConfig


@dataclass
class TritonMetadata:
    """Per-forward metadata: device buffers (static under graphs) plus the launch plan."""

    seq_lens: torch.Tensor  # [B] int32: prefix + new tokens (the batch convention)
    ext_lens: torch.Tensor  # [B] int32: new tokens
    ext_start: torch.Tensor  # [B] int32: first token row of each request
    req_pool_indices: torch.Tensor  # [B] int64: rows of req_to_token
    tree_mask: torch.Tensor | None  # [B, s, s] uint8 (1 = may attend) or None
    mid_o: torch.Tensor  # [T, H, S, D] fp32 split partials ([1, 1, 1, 1] when S == 1)
    mid_lse: torch.Tensor  # [T, H, S] fp32 ([1, 1, 1] when S == 1)
    plan: LaunchPlan
    # [B * Hkv] int32 tickets at 0 of the decode kernel's in-launch merge (None: merge kernel)
    sem: torch.Tensor | None = None

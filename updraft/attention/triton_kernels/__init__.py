"""Triton kernels of the ``triton`` attention backend.

* ``kv_store``: writes new K/V rows to their pool slots (fused K and V, one launch per layer).
* ``decode``: split-KV flash-decoding, one query per request, GQA-grouped.
* ``extend``: new tokens over a cached prefix (prefix from the pool, new K/V as tensors), causal
  inside the new block, optional tree mask, optional KV splits.
* ``merge``: the second pass of split-KV: combines per-split partial outputs by their LSE.

Numerics: every dot product on fp32 inputs uses ``input_precision="ieee"`` (no TF32), so fp32
meets the kit's 1e-4 relative tolerance; bf16/fp16 inputs use tensor cores with fp32
accumulation, and softmax statistics are always fp32. Softmax runs in the log2 domain
(``exp2``), with the scale pre-multiplied by log2(e).

Launch: every kernel starts with ``ops.triton_utils.pdl_enter`` (programmatic dependent launch on
sm_90+: it waits for the kernel before it before reading anything); the decode and extend
kernels let the next kernel launch after their KV loop (``pdl_release_late``), the small ones at
once. Releasing at once in the MLA decode (two waves of programs) cost it 10% on the H100.

Interpreter note: under ``TRITON_INTERPRET=1`` (CPU tests), ``tl.dot`` on bf16 operands is wrong
in triton 3.9's interpreter (bf16 is stored as uint16 and multiplied as integers). The kernels
take a ``DOT_F32`` constexpr that upcasts dot operands to fp32; it is set only when interpreting
bf16, so bf16 loads, casts and stores are still exercised on CPU, the bf16 tensor-core dot only
on the GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


def interpreting() -> bool:
    """True when triton kernels run in the CPU interpreter (must be set before triton import)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def dot_precision(dtype: torch.dtype, dot_f32: bool) -> str:
    """``tl.dot`` input precision: IEEE for fp32 operands (no TF32: the 1e-4 fp32 tolerance needs
    it); the default ("tf32", which only affects fp32 operands) for bf16/fp16 tensor-core dots."""
    return "ieee" if dot_f32 or dtype == torch.float32 else "tf32"


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


@dataclass(frozen=True)
class TileConfig:
    """Compile-time tiling of one attention kernel launch (all frozen host scalars).

    ``block_rows``: query rows per program (decode: the padded head group; extend: tokens x
    padded group). ``block_n``: keys per inner iteration. ``min_split``: fewest keys a KV split
    covers (a multiple of ``block_n``); with the split length derived on device from the
    request's length, short requests use fewer splits and the rest exit at once.
    """

    block_rows: int
    block_n: int
    min_split: int
    num_warps: int
    num_stages: int

"""The triton backend's per-forward metadata in one launch (``TritonBackend._fill_metadata``).

``seq_lens``, ``ext_lens``, ``ext_start`` and ``req_pool_indices`` copied from the batch into the
metadata's own buffers (static under graphs), converting dtypes, and ``kv_lens = max(seq_lens -
ext_lens, 0)`` (padded graph rows have ``seq_lens = 1 < ext_lens = stride``). Inside a graph the
torch version is six kernel nodes per forward, and a speculative iteration fills metadata six
times. Grid: one program; the batch is one ``BLOCK = next_pow2(B)`` tile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.ops.triton_utils import pdl_enter, pdl_opts


@triton.jit
def _fill_kernel(SeqIn, ExtIn, StartIn, RowsIn, Seq, Ext, Start, Rows, KvLens, B, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    i = tl.arange(0, BLOCK)
    m = i < B
    seq = tl.load(SeqIn + i, mask=m, other=0).to(Seq.dtype.element_ty)
    ext = tl.load(ExtIn + i, mask=m, other=0).to(Ext.dtype.element_ty)
    tl.store(Seq + i, seq, mask=m)
    tl.store(Ext + i, ext, mask=m)
    tl.store(Start + i, tl.load(StartIn + i, mask=m, other=0).to(Start.dtype.element_ty), mask=m)
    tl.store(Rows + i, tl.load(RowsIn + i, mask=m, other=0).to(Rows.dtype.element_ty), mask=m)
    tl.store(KvLens + i, tl.maximum(seq - ext, 0).to(KvLens.dtype.element_ty), mask=m)


def fill(seq_in: torch.Tensor, ext_in: torch.Tensor, start_in: torch.Tensor, rows_in: torch.Tensor,
         seq: torch.Tensor, ext: torch.Tensor, start: torch.Tensor, rows: torch.Tensor, kv_lens: torch.Tensor) -> None:
    """The copies and ``kv_lens`` above, over ``seq.shape[0]`` requests, in one launch."""
    b = seq.shape[0]
    if b == 0:
        return
    _fill_kernel[(1,)](seq_in, ext_in, start_in, rows_in, seq, ext, start, rows, kv_lens, b,
                       BLOCK=triton.next_power_of_2(b), num_warps=1, **pdl_opts(seq_in.device, "attention"))

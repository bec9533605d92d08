"""MLA decode: the queries of a request over its whole latent cache, read from the pool (DECODE,
DRAFT_DECODE, TARGET_VERIFY).

Every key this forward needs is in the pool already (the backend stores the new latent rows
first), so the kernel reads positions ``[0, seq_lens[b])`` through ``req_to_token`` and nothing
else. Request ``b``'s ``STRIDE`` query tokens (1 in decode, ndt in verify) sit at positions
``kv_lens[b] + i`` (``kv_lens = max(seq_lens - STRIDE, 0)``, derived here); token ``i`` sees
positions ``<= kv_lens[b] + i`` (causal in the verify block), and with ``TREE`` a block position
``kv_lens[b] + j`` only where ``tree_mask[b, i, j]``. Padded graph rows (``seq_lens`` = 1,
``req_pool_indices`` = 0) see position 0 of the padding row: the scratch slot.

Query rows: the decode-like modes are fixed-stride, so request ``b``'s queries are rows
``b * STRIDE .. b * STRIDE + STRIDE - 1``, taken from the frozen stride (a constexpr), never from a
start offset in the metadata: capture and replay cannot lay the rows out differently (failure
class 1), and unseeded capture metadata still writes every row (zeros: class 8).

Grid ``(cdiv(STRIDE * H, BLOCK_M), B, num_splits)``: a program holds BLOCK_M (token, head) rows
of one request (see ``mla_common``: verify packs ndt x heads into the dot's M dimension) and one
KV split. The head-block axis is the fastest-varying one, so the programs that read the same
latent rows (the head blocks of one request and split) run side by side and share them in L2.

Pipelining (``PREFETCH``): the slots loaded one block ahead, so ``num_stages = 3``
double-buffers the latent tile (``slots.py`` says why it takes that).

Early metadata (``EARLY_META``, with PDL): a program reads its request's length and pool row BEFORE
its PDL wait, so its split's bounds are known when the wait returns and the queries and the first
slots load side by side (one dependent round trip off the wait-to-first-tile path; H100,
2026-12-07, issue 15's measure at bs 8 / 8k: 36.7 -> 36.3-36.4 us, the latent-rows kernel before
it unchanged, ``benchmarks/results/2026-12-07-h100-mla-early-form``). Safe by the PDL contract
(``ops.triton_utils``): when this kernel starts, every kernel before the one right before it has
completed, and the lengths and pool rows are written by the batch's builder or ``read_rows``,
kernels earlier, never by the layer's latent-rows or store kernel right before this one. Reading
the first slots before the wait too took nothing more off there (36.3) but put 0.9 us on behind the
latent-rows kernel (not a PDL launch: the wait returns at once, and the queries then load only
after the slots); copying the first latent tiles before it as well gained ~0.1 us and needs a loop
that costs 3-8 us (the same folder's ``early-copies.patch``). Neither is done.

Splits: ``num_splits`` is a host scalar (frozen at graph capture); the split LENGTH is derived on
device, ``max(round_up(cdiv(seq, num_splits), BLOCK_N), MIN_SPLIT)``, so a short context uses
few splits (one pass, written directly when ``num_splits == 1``), a long one all of them, and
trailing empty splits store lse = -inf, which the merge skips without loading their partials.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from updraft.attention.triton_kernels import TileConfig
from updraft.attention.triton_kernels.merge import merge_splits
from updraft.attention.triton_kernels.mla_common import (
    grid_rows,
    latent_block,
    latent_consts,
    load_query_rows,
    store_rows,
)
from updraft.attention.triton_kernels.slots import block_slots, first_slots, split_len
from updraft.ops.triton_utils import pdl_enter, pdl_opts, pdl_release_late


@triton.jit
def _mla_decode_kernel(
    Q, KPool, Out, MidO, MidLse, ReqToToken, ReqPoolIdx, SeqLens, TreeMask,
    stride_qt, stride_qh, stride_ks, stride_rt, stride_ot, stride_oh, stride_mt, stride_mh, stride_ms,
    stride_lt, stride_lh, stride_tb, stride_ti, scale_log2, num_splits,
    NUM_HEADS: tl.constexpr, STRIDE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DV: tl.constexpr,
    DR: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_DR: tl.constexpr, MIN_SPLIT: tl.constexpr, TREE: tl.constexpr,
    DIRECT: tl.constexpr, DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr, PREFETCH: tl.constexpr, PDL: tl.constexpr,
    EARLY_META: tl.constexpr,
):
    if not EARLY_META:
        pdl_enter(PDL)
    mblk = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)

    if EARLY_META:  # before the PDL wait, through L2 (the module docstring says why that is safe)
        seq = tl.load(SeqLens + b, cache_modifier=".cg")
        rpi = tl.load(ReqPoolIdx + b, cache_modifier=".cg").to(tl.int64)
    else:
        seq = tl.load(SeqLens + b)
        rpi = tl.load(ReqPoolIdx + b).to(tl.int64)
    kv = tl.maximum(seq - STRIDE, 0)  # keys before the query block: every query row sees them

    r = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
    ti = r // NUM_HEADS
    head = r % NUM_HEADS
    rvalid = ti < STRIDE
    qrow = b * STRIDE + ti  # the uniform layout, from the frozen stride (see the module docstring)
    dv = tl.arange(0, BLOCK_DV)
    dr = tl.arange(0, BLOCK_DR)
    if not EARLY_META:
        qc, qr = load_query_rows(Q, qrow, head, rvalid, stride_qt, stride_qh, dv, dr, DV, DR, DOT_F32)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)

    span = split_len(seq, num_splits, BLOCK_N, MIN_SPLIT)
    lo = split * span
    hi = tl.minimum(lo + span, seq)
    table_row = ReqToToken + rpi * stride_rt
    if EARLY_META:  # the queries (the kernel before wrote them), the slots and every latent row after it
        pdl_enter(PDL)
        qc, qr = load_query_rows(Q, qrow, head, rvalid, stride_qt, stride_qh, dv, dr, DV, DR, DOT_F32)
    slot_next = first_slots(table_row, lo, hi, BLOCK_N, PREFETCH)
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        pmask = pos < hi
        slot, slot_next = block_slots(table_row, pos, hi, slot_next, BLOCK_N, PREFETCH)
        # Query token i sits at position kv + i: causal inside the block (always true in decode).
        allowed = pmask[None, :] & (pos[None, :] <= kv + ti[:, None])
        if TREE:
            rel = pos - kv  # index inside the draft block; < 0 in the prefix, which stays visible
            tm = tl.load(TreeMask + b * stride_tb + ti[:, None] * stride_ti + rel[None, :],
                         mask=rvalid[:, None] & (rel[None, :] >= 0) & (rel[None, :] < STRIDE) & pmask[None, :], other=1)
            allowed = allowed & (tm != 0)
        m_i, l_i, acc = latent_block(qc, qr, m_i, l_i, acc, KPool, slot, stride_ks, pmask, allowed, dv, dr, scale_log2,
                                     DV, DR, Q.dtype.element_ty, DOT_F32, DOT_PREC)

    pdl_release_late(PDL)
    store_rows(Out, MidO, MidLse, qrow, head, split, dv, rvalid, m_i, l_i, acc, stride_ot, stride_oh, stride_mt,
               stride_mh, stride_ms, stride_lt, stride_lh, DV, DIRECT)


def mla_decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    out: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    tree_mask: torch.Tensor | None,
    mid_o: torch.Tensor,
    mid_lse: torch.Tensor,
    stride: int,
    num_splits: int,
    scale: float,
    cfg: TileConfig,
    dot_f32: bool,
    early_metadata: bool = False,
    merge_max_programs: int = 0,
) -> None:
    """``q`` [T, H, DV + DR] with ``T = B * stride`` query rows (request-major, ``stride`` each);
    ``k_pool`` [slots, 1, DV + DR] the latent cache of one layer; ``out`` [T, H, DV].

    ``tree_mask``: [B, stride, stride] uint8 over the query block, or None. ``mid_o``
    [T, H, num_splits, DV] / ``mid_lse`` [T, H, num_splits] are fp32 scratch for the split
    partials (unused when ``num_splits == 1``). ``stride``, ``num_splits`` and ``cfg`` are host
    scalars: under a CUDA graph, the values seen at capture. Tiles of 3 or more stages load the
    slots a block ahead (``PREFETCH``). ``early_metadata``: the lengths and pool rows read before the
    PDL wait (the module docstring; the backend passes it where the launch takes PDL).
    ``merge_max_programs``: the split merge's grid cap on PDL (``merge_splits(max_programs=)``).
    """
    num_tokens, num_heads, dim = q.shape
    bsz = seq_lens.shape[0]
    if num_tokens == 0 or bsz == 0:
        return
    dv = out.shape[-1]
    assert q.stride(-1) == 1 and k_pool.stride(-1) == 1 and out.stride(-1) == 1, "rows must be contiguous"
    assert k_pool.shape[1] == 1 and k_pool.shape[-1] == dim, f"latent pool {tuple(k_pool.shape)} for q {tuple(q.shape)}"
    direct = num_splits == 1
    if not direct:
        assert mid_o.shape == (num_tokens, num_heads, num_splits, dv), f"mid_o {tuple(mid_o.shape)}"
    tm = tree_mask if tree_mask is not None else seq_lens  # placeholder pointer, never read
    tb, ti = (tree_mask.stride(0), tree_mask.stride(1)) if tree_mask is not None else (0, 0)
    log2e = 1.4426950408889634
    grid = (grid_rows(stride, num_heads, cfg.block_rows), bsz, num_splits)
    _mla_decode_kernel[grid](
        q, k_pool, out, mid_o, mid_lse, req_to_token, req_pool_indices, seq_lens, tm,
        q.stride(0), q.stride(1), k_pool.stride(0), req_to_token.stride(0), out.stride(0), out.stride(1),
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1), tb, ti,
        scale * log2e, num_splits,
        NUM_HEADS=num_heads, STRIDE=stride, BLOCK_M=cfg.block_rows, BLOCK_N=cfg.block_n, MIN_SPLIT=cfg.min_split,
        TREE=tree_mask is not None, DIRECT=direct, PREFETCH=cfg.num_stages >= 3, EARLY_META=early_metadata,
        **latent_consts(dv, dim, q.dtype, dot_f32),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_opts(q.device, "attention", late=True),
    )
    if not direct:
        # a split without keys stores zeros (store_rows)
        merge_splits(mid_o, mid_lse, out, written=True, max_programs=merge_max_programs)


"""One launch for the inputs of a fixed-stride batch on the device (the fused iteration's draft
steps, its verify block and its draft extend, and the plain decode step).

Request ``b`` (table row ``rows[b]``) has ``W`` tokens ``ids[b]`` at positions ``p .. p + W - 1``,
``p = first_pos[b] + offset`` (``offset`` a host int: the chain's position offsets cost no kernel
of their own); their KV slots are read from ``req_to_token`` (allocated by the host
beforehand). The batch's ``input_ids``, ``positions``, ``out_cache_loc``, ``req_pool_indices``
and ``seq_lens`` (``p + W``) are written in place. Inside a CUDA graph every torch op is
a kernel node: the torch version below is nine of them (an arange, an add, a gather, six copies),
this kernel one, and a speculative iteration at S = 5 runs it six times.

``read_rows`` goes the other way at the start of the iteration: the rows' committed length, bonus
token, draft feature and sampling parameters from their tables, and (sampled) the iteration's
uniforms from the rows' RNG keys: one launch for four gathers and a draw.

Hazards: positions and table rows are not bounds-checked (as the torch gather on CUDA, which
fails asynchronously); ``ids`` must be ``[bs, W]`` or ``[bs]`` (``W`` = 1).

Dispatch (as ``updraft.spec.sampling_kernels``): the kernel on CUDA tensors and, for tests, on
CPU tensors under the Triton interpreter; otherwise the torch code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from updraft.batch import ForwardBatch
from updraft.ops.triton_utils import pdl_enter, pdl_opts
from updraft.spec import device_rng
from updraft.spec.sampling_kernels import stream_constant, uniform_row, use_triton


@triton.jit
def _write_rows_kernel(Rows, FirstPos, Ids, Table, InputIds, Positions, OutLoc, ReqIdx, SeqLens,
                       stride_ids, stride_table, offset, W: tl.constexpr, BLOCK_W: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    b = tl.program_id(0)
    j = tl.arange(0, BLOCK_W)
    jm = j < W
    row = tl.load(Rows + b).to(tl.int64)
    p0 = tl.load(FirstPos + b).to(tl.int64) + offset
    pos = p0 + j
    out = b * W + j
    ids = tl.load(Ids + b * stride_ids + j, mask=jm, other=0)
    tl.store(InputIds + out, ids.to(InputIds.dtype.element_ty), mask=jm)
    tl.store(Positions + out, pos.to(Positions.dtype.element_ty), mask=jm)
    loc = tl.load(Table + row * stride_table + pos, mask=jm, other=0)
    tl.store(OutLoc + out, loc.to(OutLoc.dtype.element_ty), mask=jm)
    tl.store(ReqIdx + b, row.to(ReqIdx.dtype.element_ty))
    tl.store(SeqLens + b, (p0 + W).to(SeqLens.dtype.element_ty))


def write_rows_torch(batch: ForwardBatch, rows: torch.Tensor, first_pos: torch.Tensor, ids: torch.Tensor,
                     req_to_token: torch.Tensor, offset: int = 0) -> None:
    """The reference (and the CPU path)."""
    w = batch.stride
    if offset:
        first_pos = first_pos + offset
    pos = first_pos[:, None] + torch.arange(w, device=rows.device)  # [bs, w]
    batch.input_ids.copy_(ids.reshape(-1))
    batch.positions.copy_(pos.reshape(-1))
    batch.out_cache_loc.copy_(req_to_token[rows[:, None], pos].reshape(-1))
    batch.req_pool_indices.copy_(rows)
    batch.seq_lens.copy_(first_pos + w)


def write_rows(batch: ForwardBatch, rows: torch.Tensor, first_pos: torch.Tensor, ids: torch.Tensor,
               req_to_token: torch.Tensor, offset: int = 0) -> None:
    """Fill ``batch`` (stride ``W``, ``len(rows)`` requests) in one launch where Triton runs."""
    w, bs = batch.stride, rows.shape[0]
    if not use_triton(rows):
        write_rows_torch(batch, rows, first_pos, ids, req_to_token, offset)
        return
    ids2 = ids.reshape(bs, w)
    if w > 1 and ids2.stride(1) != 1:  # one token a row: any stride (a column of the verify block's ids)
        ids2 = ids2.contiguous()
    _write_rows_kernel[(bs,)](
        rows, first_pos, ids2, req_to_token, batch.input_ids, batch.positions, batch.out_cache_loc,
        batch.req_pool_indices, batch.seq_lens, ids2.stride(0), req_to_token.stride(0), offset,
        W=w, BLOCK_W=triton.next_power_of_2(w), num_warps=1, **pdl_opts(rows.device, "sampling"),
    )


# ---- the other way: a batch's per-row state, read in one launch -------------------------------
@dataclass(frozen=True)
class RowsRead:
    """What ``read_rows`` returns: the rows' committed length and bonus token [bs], their draft
    feature and sampling parameters [bs, D] (None where not asked for), and their uniforms
    [bs, n] float32 (None where not asked for)."""

    seq_len: torch.Tensor
    bonus: torch.Tensor
    feat: torch.Tensor | None
    params: torch.Tensor | None
    uniforms: torch.Tensor | None


@dataclass(frozen=True)
class UniformDraw:
    """``read_rows``'s draw of ``n`` counter-based uniforms per row from RNG ``stream``
    (``device_rng.uniform``): ``seed`` / ``offset`` are the whole [rows] columns of the RNG
    table, read at the batch's rows in the launch (any strides)."""

    seed: torch.Tensor
    offset: torch.Tensor
    stream: int
    n: int


@triton.jit
def _read_rows_kernel(Rows, SeqLen, Bonus, Feat, FeatOut, Prm, PrmOut, NOut, BonusOut, s_bonus, stride_f, stride_p,
                      Seed, s_seed, Offset, s_offset, UOut, stream_c, n_u,
                      D: tl.constexpr, BLOCK_D: tl.constexpr, P: tl.constexpr, BLOCK_P: tl.constexpr,
                      U: tl.constexpr, BLOCK_U: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    b = tl.program_id(0)
    row = tl.load(Rows + b).to(tl.int64)
    tl.store(NOut + b, tl.load(SeqLen + row))
    tl.store(BonusOut + b * s_bonus, tl.load(Bonus + row))
    if D > 0:
        for d0 in range(0, D, BLOCK_D):
            d = d0 + tl.arange(0, BLOCK_D)
            tl.store(FeatOut + b * D + d, tl.load(Feat + row * stride_f + d, mask=d < D), mask=d < D)
    if P > 0:
        p = tl.arange(0, BLOCK_P)
        tl.store(PrmOut + b * P + p, tl.load(Prm + row * stride_p + p, mask=p < P), mask=p < P)
    if U:
        uniform_row(Seed, s_seed, Offset, s_offset, row, UOut + b.to(tl.int64) * n_u, stream_c, n_u, BLOCK_U)


def read_rows(rows: torch.Tensor, seq_len: torch.Tensor, bonus: torch.Tensor, feat: torch.Tensor | None = None,
              params: torch.Tensor | None = None, draw: UniformDraw | None = None,
              bonus_out: torch.Tensor | None = None) -> RowsRead:
    """``seq_len[rows]``, ``bonus[rows]``, ``feat[rows]``, ``params[rows]`` and, with ``draw``,
    ``device_rng.uniform(draw.seed[rows], draw.offset[rows], draw.stream, draw.n)`` bit for bit:
    the fused iteration's per-row state at the start of its body, in one launch where Triton
    runs (inside a graph, torch's gathers are one kernel node each, and none of them overlaps its
    neighbours under PDL). ``seq_len`` / ``bonus`` [rows] and ``feat`` / ``params`` [rows, D]
    with contiguous rows; same hazards as ``write_rows``. ``bonus_out`` [bs] (any stride, e.g. the
    first column of the verify block's ids) receives the bonus tokens and is returned as them."""
    if not use_triton(rows):
        u = (device_rng.uniform(draw.seed[rows], draw.offset[rows], draw.stream, draw.n)
             if draw is not None else None)
        got = bonus[rows]
        return RowsRead(seq_len[rows], bonus_out.copy_(got) if bonus_out is not None else got,
                        feat[rows] if feat is not None else None, params[rows] if params is not None else None, u)
    bs = rows.shape[0]
    n_out = torch.empty(bs, dtype=seq_len.dtype, device=rows.device)
    b_out = bonus_out if bonus_out is not None else torch.empty(bs, dtype=bonus.dtype, device=rows.device)
    if b_out.shape != (bs,):
        raise ValueError(f"read_rows: bonus_out must be [{bs}], got {list(b_out.shape)}")
    f_out = torch.empty(bs, feat.shape[1], dtype=feat.dtype, device=rows.device) if feat is not None else None
    p_out = torch.empty(bs, params.shape[1], dtype=params.dtype, device=rows.device) if params is not None else None
    u_out = torch.empty(bs, draw.n, dtype=torch.float32, device=rows.device) if draw is not None else None
    for t in (feat, params):
        if t is not None and t.stride(1) != 1:
            raise ValueError("read_rows needs rows contiguous along their last dimension")
    d = feat.shape[1] if feat is not None else 0
    p = params.shape[1] if params is not None else 0
    if bs:
        block_d = min(triton.next_power_of_2(max(d, 1)), 4096)
        seed = draw.seed if draw is not None else seq_len
        offset = draw.offset if draw is not None else seq_len
        _read_rows_kernel[(bs,)](
            rows, seq_len, bonus, feat if feat is not None else seq_len, f_out if f_out is not None else n_out,
            params if params is not None else seq_len, p_out if p_out is not None else n_out, n_out, b_out, b_out.stride(0),
            feat.stride(0) if feat is not None else 0, params.stride(0) if params is not None else 0,
            seed, seed.stride(0), offset, offset.stride(0), u_out if u_out is not None else n_out,
            stream_constant(draw.stream) if draw is not None else 0, draw.n if draw is not None else 0,
            D=d, BLOCK_D=block_d, P=p, BLOCK_P=triton.next_power_of_2(max(p, 1)), U=draw is not None,
            BLOCK_U=triton.next_power_of_2(max(draw.n if draw is not None else 1, 1)),
            num_warps=4 if block_d >= 1024 else 1, **pdl_opts(rows.device, "sampling"),
        )
    return RowsRead(n_out, b_out, f_out, p_out, u_out)

"""The fused iteration's per-row I/O on the device, in ONE launch at the start of its body
(``read_rows``): the rows' state in, every fixed-stride batch's inputs out.

In: each request's committed length ``N``, bonus token, draft feature and (sampled) sampling
parameters, gathered from their tables at the batch's rows, and the iteration's uniforms drawn from
the rows' RNG keys.

Out (``IterLayout``): the positions, KV slots and ``seq_lens`` of every forward the iteration
runs (the chain's draft steps, the verify block, the draft extend). Segment ``j`` holds ``W_j``
tokens per request at positions ``p .. p + W_j - 1``, ``p = N + offset_j`` (host ints: EAGLE's
chain offsets cost no kernel), its slots read from ``req_to_token`` (allocated by the host
beforehand) and ``seq_lens = p + W_j``. The batches' tensors ARE views of the layout's storage
(``lay_out``), and the triton backend's metadata is bound to the batches' own tensors, so no
forward of the iteration needs a launch to set its inputs up: inside a CUDA graph each torch op
is a kernel node, and the six per-forward writes plus six metadata copies this replaces were
twelve of them at S = 5. Token ids are written where they are produced (the bonus here, the
drafts by the draft steps' picks, the emitted tokens by the verify's argmax or acceptance), and
every batch's ``req_pool_indices`` is the iteration's row list itself.

Hazards: positions and table rows are not bounds-checked (as the torch gather on CUDA, which
fails asynchronously). A segment may be shared by several batches of equal stride and offset
(the verify block and the draft extend read the same positions and slots).

Dispatch (as ``updraft.spec.sampling_kernels``): the kernel on CUDA tensors and, for tests, on
CPU tensors under the Triton interpreter; otherwise the torch code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from updraft import ops
from updraft.batch import ForwardBatch
from updraft.ops.norm import normalise
from updraft.ops.triton_utils import emulate_rne, pdl_enter, pdl_opts
from updraft.spec import device_rng
from updraft.spec.sampling_kernels import stream_constant, uniform_row, use_triton


@dataclass(frozen=True)
class IterLayout:
    """Where ``read_rows`` lays out an iteration's forwards (see the module docstring):
    ``positions`` / ``out_cache_loc`` [T] int64 (segment ``j``'s ``bs * W_j`` tokens from row
    ``first_token[j]``, request-major), ``seq_lens`` [J, bs] int32, ``table`` the request table
    (``req_to_token``); ``widths`` / ``offsets`` / ``first_token`` per segment as host ints, and
    the same as ``seg`` [J, 3] int32 on the device (what the kernel reads)."""

    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    seq_lens: torch.Tensor
    table: torch.Tensor
    widths: tuple[int, ...]
    offsets: tuple[int, ...]
    first_token: tuple[int, ...]
    seg: torch.Tensor

    @property
    def num_segments(self) -> int:
        return len(self.widths)

    def write_torch(self, rows: torch.Tensor, n: torch.Tensor) -> None:
        """The reference (and the CPU path): what the kernel writes, by torch ops."""
        bs = rows.shape[0]
        for j, (w, off, t0) in enumerate(zip(self.widths, self.offsets, self.first_token)):
            pos = (n + off)[:, None] + torch.arange(w, device=rows.device)  # [bs, w]
            self.positions[t0 : t0 + bs * w].copy_(pos.reshape(-1))
            self.out_cache_loc[t0 : t0 + bs * w].copy_(self.table[rows[:, None], pos].reshape(-1))
            self.seq_lens[j].copy_(n + off + w)


def lay_out(segments: list[tuple[int, list[ForwardBatch]]], rows: torch.Tensor,
            table: torch.Tensor) -> tuple[IterLayout, list[list[ForwardBatch]]]:
    """An ``IterLayout`` over ``segments`` (each: a position offset and the fixed-stride batches
    that share it: equal stride, ``len(rows)`` requests each) and the batches rebound to it: their
    ``positions`` / ``out_cache_loc`` / ``seq_lens`` become views of the layout (seeded with the
    values they held: a capture must not see zero lengths, failure class 8) and their
    ``req_pool_indices`` is ``rows``. Token ids are left to the caller."""
    bs, dev = rows.shape[0], rows.device
    widths, offsets, first, t = [], [], [], 0
    for off, batches in segments:
        w = batches[0].stride
        if w < 1 or any(b.stride != w or b.batch_size != bs for b in batches):
            raise ValueError(f"lay_out: a segment's batches need one stride >= 1 and {bs} requests")
        widths.append(w)
        offsets.append(off)
        first.append(t)
        t += bs * w
    layout = IterLayout(torch.zeros(t, dtype=torch.int64, device=dev), torch.zeros(t, dtype=torch.int64, device=dev),
                        torch.zeros(len(segments), bs, dtype=torch.int32, device=dev), table, tuple(widths),
                        tuple(offsets), tuple(first),
                        torch.tensor(list(zip(widths, offsets, first)), dtype=torch.int32, device=dev).reshape(-1, 3))
    out = []
    for j, (_, batches) in enumerate(segments):
        lo, hi = first[j], first[j] + bs * widths[j]
        pos, loc, seq = layout.positions[lo:hi], layout.out_cache_loc[lo:hi], layout.seq_lens[j]
        pos.copy_(batches[0].positions)
        loc.copy_(batches[0].out_cache_loc)
        seq.copy_(batches[0].seq_lens)
        out.append([dataclasses.replace(b, positions=pos, out_cache_loc=loc, seq_lens=seq, req_pool_indices=rows)
                    for b in batches])
    return layout, out


# ---- the launch ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RowsRead:
    """What ``read_rows`` returns: the rows' committed length and bonus token [bs], their draft
    feature and sampling parameters [bs, D] (None where not asked for), their uniforms [bs, n]
    float32 (None where not asked for) and, with a ``RowNorm``, the feature's RMSNorm [bs, D]."""

    seq_len: torch.Tensor
    bonus: torch.Tensor
    feat: torch.Tensor | None
    params: torch.Tensor | None
    uniforms: torch.Tensor | None
    normed: torch.Tensor | None = None


#: The widest register tile of a feature row in ``read_rows``: wider rows are copied in chunks
#: of it, and normalised (``RowNorm``) only where one tile holds them.
MAX_TILE = 4096


@dataclass(frozen=True)
class RowNorm:
    """``read_rows`` also writes the gathered features' RMSNorm (``ops.rmsnorm(feat[rows],
    weight, eps)``: the first draft's LM head input, without a launch of its own). The kernel
    holds a row in one tile, so features up to ``MAX_TILE`` wide; wider ones take ``ops.rmsnorm``
    after the gather."""

    weight: torch.Tensor
    eps: float


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
def _lay_out_row(b, bs, row, n, Table, s_table, Pos, Loc, Seq, Seg, J: tl.constexpr, BLOCK_W: tl.constexpr):
    """Request ``b``'s tokens of every segment of the layout (``IterLayout``)."""
    i = tl.arange(0, BLOCK_W)
    for j in tl.static_range(J):
        w = tl.load(Seg + 3 * j)
        p0 = n + tl.load(Seg + 3 * j + 1)
        dst = tl.load(Seg + 3 * j + 2).to(tl.int64) + b * w + i
        im = i < w
        pos = p0 + i
        tl.store(Pos + dst, pos, mask=im)
        tl.store(Loc + dst, tl.load(Table + row * s_table + pos, mask=im, other=0).to(Loc.dtype.element_ty), mask=im)
        tl.store(Seq + j * bs + b, (p0 + w).to(Seq.dtype.element_ty))


@triton.jit
def _read_rows_kernel(Rows, SeqLen, Bonus, Feat, FeatOut, Prm, PrmOut, NOut, BonusOut, s_bonus, stride_f, stride_p,
                      Seed, s_seed, Offset, s_offset, UOut, stream_c, n_u, Table, s_table, Pos, Loc, Seq, Seg, bs,
                      NormW, NormOut, eps,
                      D: tl.constexpr, BLOCK_D: tl.constexpr, P: tl.constexpr, BLOCK_P: tl.constexpr,
                      U: tl.constexpr, BLOCK_U: tl.constexpr, J: tl.constexpr, BLOCK_W: tl.constexpr,
                      NORM: tl.constexpr, RNE: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    b = tl.program_id(0)
    row = tl.load(Rows + b).to(tl.int64)
    n = tl.load(SeqLen + row)
    tl.store(NOut + b, n)
    tl.store(BonusOut + b * s_bonus, tl.load(Bonus + row))
    if NORM:  # one tile holds the row (D <= BLOCK_D): ops.rmsnorm's numerics (``normalise``)
        d = tl.arange(0, BLOCK_D)
        x = tl.load(Feat + row * stride_f + d, mask=d < D, other=0.0)
        tl.store(FeatOut + b * D + d, x, mask=d < D)
        xf = x.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / D + eps)
        w = tl.load(NormW + d, mask=d < D, other=0.0).to(tl.float32)
        tl.store(NormOut + b * D + d, normalise(xf, rstd, w, Feat.dtype.element_ty, NormOut.dtype.element_ty, RNE),
                 mask=d < D)
    elif D > 0:
        for d0 in range(0, D, BLOCK_D):
            d = d0 + tl.arange(0, BLOCK_D)
            tl.store(FeatOut + b * D + d, tl.load(Feat + row * stride_f + d, mask=d < D), mask=d < D)
    if P > 0:
        p = tl.arange(0, BLOCK_P)
        tl.store(PrmOut + b * P + p, tl.load(Prm + row * stride_p + p, mask=p < P), mask=p < P)
    if U:
        uniform_row(Seed, s_seed, Offset, s_offset, row, UOut + b.to(tl.int64) * n_u, stream_c, n_u, BLOCK_U)
    if J > 0:
        _lay_out_row(b, bs, row, n.to(tl.int64), Table, s_table, Pos, Loc, Seq, Seg, J, BLOCK_W)


def read_rows(rows: torch.Tensor, seq_len: torch.Tensor, bonus: torch.Tensor, feat: torch.Tensor | None = None,
              params: torch.Tensor | None = None, draw: UniformDraw | None = None,
              bonus_out: torch.Tensor | None = None, layout: IterLayout | None = None,
              norm: RowNorm | None = None) -> RowsRead:
    """``seq_len[rows]``, ``bonus[rows]``, ``feat[rows]``, ``params[rows]`` and, with ``draw``,
    ``device_rng.uniform(draw.seed[rows], draw.offset[rows], draw.stream, draw.n)`` bit for bit:
    the fused iteration's per-row state at the start of its body, in one launch where Triton
    runs (inside a graph, torch's gathers are one kernel node each, and none of them overlaps its
    neighbours under PDL). ``seq_len`` / ``bonus`` [rows] and ``feat`` / ``params`` [rows, D]
    with contiguous rows. ``bonus_out`` [bs] (any stride, e.g. the first column of the verify
    block's ids) receives the bonus tokens and is returned as them. With ``layout``, the same
    launch writes it for these rows (``IterLayout``; ``N = seq_len[rows]``). With ``norm`` (and
    ``feat``): also the gathered features' RMSNorm (``RowNorm``)."""
    if norm is not None and (feat is None or tuple(norm.weight.shape) != (feat.shape[1],) or not norm.weight.is_contiguous()):
        raise ValueError("read_rows: a RowNorm needs the features and a contiguous weight as wide as they are")
    if not use_triton(rows) or (norm is not None and norm.weight.shape[0] > MAX_TILE):
        got = _read_rows_torch(rows, seq_len, bonus, feat, params, draw, bonus_out, layout)
        if norm is None or got.feat is None:  # (a norm comes with the features: checked above)
            return got
        return dataclasses.replace(got, normed=ops.rmsnorm(got.feat, norm.weight, norm.eps))
    return _read_rows_kernel_launch(rows, seq_len, bonus, feat, params, draw, bonus_out, layout, norm)


def _read_rows_torch(rows: torch.Tensor, seq_len: torch.Tensor, bonus: torch.Tensor, feat: torch.Tensor | None,
                     params: torch.Tensor | None, draw: UniformDraw | None, bonus_out: torch.Tensor | None,
                     layout: IterLayout | None) -> RowsRead:
    """``read_rows`` by torch ops (off CUDA without the interpreter)."""
    u = device_rng.uniform(draw.seed[rows], draw.offset[rows], draw.stream, draw.n) if draw is not None else None
    got, n = bonus[rows], seq_len[rows]
    if layout is not None:
        layout.write_torch(rows, n)
    return RowsRead(n, bonus_out.copy_(got) if bonus_out is not None else got,
                    feat[rows] if feat is not None else None, params[rows] if params is not None else None, u)


def _read_rows_kernel_launch(rows: torch.Tensor, seq_len: torch.Tensor, bonus: torch.Tensor, feat: torch.Tensor | None,
                             params: torch.Tensor | None, draw: UniformDraw | None, bonus_out: torch.Tensor | None,
                             layout: IterLayout | None, norm: RowNorm | None) -> RowsRead:
    bs = rows.shape[0]
    n_out = torch.empty(bs, dtype=seq_len.dtype, device=rows.device)
    b_out = bonus_out if bonus_out is not None else torch.empty(bs, dtype=bonus.dtype, device=rows.device)
    if b_out.shape != (bs,):
        raise ValueError(f"read_rows: bonus_out must be [{bs}], got {list(b_out.shape)}")
    f_out = torch.empty(bs, feat.shape[1], dtype=feat.dtype, device=rows.device) if feat is not None else None
    p_out = torch.empty(bs, params.shape[1], dtype=params.dtype, device=rows.device) if params is not None else None
    u_out = torch.empty(bs, draw.n, dtype=torch.float32, device=rows.device) if draw is not None else None
    n_norm = None
    if norm is not None and f_out is not None:
        n_norm = torch.empty_like(f_out, dtype=torch.promote_types(f_out.dtype, norm.weight.dtype))
    for t in (feat, params):
        if t is not None and t.stride(1) != 1:
            raise ValueError("read_rows needs rows contiguous along their last dimension")
    d = feat.shape[1] if feat is not None else 0
    p = params.shape[1] if params is not None else 0
    lay = layout if layout is not None else IterLayout(n_out, n_out, n_out, n_out, (), (), (), n_out)
    if layout is not None and layout.seq_lens.shape[1] != bs:
        raise ValueError(f"read_rows: a layout for {layout.seq_lens.shape[1]} requests, {bs} rows")
    if bs:
        block_d = min(triton.next_power_of_2(max(d, 1)), MAX_TILE)
        seed = draw.seed if draw is not None else seq_len
        offset = draw.offset if draw is not None else seq_len
        _read_rows_kernel[(bs,)](
            rows, seq_len, bonus, feat if feat is not None else seq_len, f_out if f_out is not None else n_out,
            params if params is not None else seq_len, p_out if p_out is not None else n_out, n_out, b_out, b_out.stride(0),
            feat.stride(0) if feat is not None else 0, params.stride(0) if params is not None else 0,
            seed, seed.stride(0), offset, offset.stride(0), u_out if u_out is not None else n_out,
            stream_constant(draw.stream) if draw is not None else 0, draw.n if draw is not None else 0,
            lay.table, lay.table.stride(0) if layout is not None else 0, lay.positions, lay.out_cache_loc,
            lay.seq_lens, lay.seg, bs, norm.weight if norm is not None else n_out,
            n_norm if n_norm is not None else n_out, float(norm.eps) if norm is not None else 0.0,
            D=d, BLOCK_D=block_d, P=p, BLOCK_P=triton.next_power_of_2(max(p, 1)), U=draw is not None,
            BLOCK_U=triton.next_power_of_2(max(draw.n if draw is not None else 1, 1)), J=lay.num_segments,
            BLOCK_W=triton.next_power_of_2(max(lay.widths, default=1)), NORM=n_norm is not None, RNE=emulate_rne(),
            num_warps=4 if block_d >= 1024 else 1, **pdl_opts(rows.device, "sampling"),
        )
    return RowsRead(n_out, b_out, f_out, p_out, u_out, n_norm)

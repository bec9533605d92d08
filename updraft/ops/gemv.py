"""Small-M weight-streaming GEMMs (M <= 64 token rows: decode, verify, draft steps and extends
of small batches) with the decoder layer's element-wise work fused in front of and behind them.

``y[m, n] = sum_k a[m, k] * W[n, k]`` with ``W`` the ``[N, K]`` row-major weight of an
``nn.Linear``. At small M a GEMM is a weight read: every program owns a tile of output columns
(weight rows) for ALL M token rows, streams its weight rows once over K in ``BLOCK_K`` chunks and
accumulates in float32. Small column tiles (8-64 rows) give hundreds of programs per GEMM, so the
132 SMs of an H100 hold several programs each and enough loads in flight to reach copy bandwidth.
No split-K: every fused epilogue below (bias, RoPE, KV store, SiLU-mul, argmax) needs the full
sum of its columns, and a split-K reduction costs a launch or an atomic (nondeterministic) sum.

Two inner products, picked per launch (``GemvConfig.dot``):

* FMA: ``sum(W_tile[:, None, :] * a[None, :, :], axis=2)`` on the CUDA cores, ``BLOCK_M`` = the
  M bucket (1, 2, 4, ...). Cheapest at M = 1-2, where tensor cores would idle.
* dot: ``tl.dot(W_tile, a^T)`` on tensor cores with the token rows padded to 16 (``BLOCK_M`` =
  16, the smallest dot tile; masked rows load nothing), the weight tile as the dot's M side
  ("swap AB"), so M = 3..16 costs the same weight read as M = 1. Past 16 rows (a 6-token verify
  of 3-8 requests, 18-48 rows) ``BLOCK_M`` is the M bucket, 32 or 64, and the K chunk shrinks
  with it (``gemv_config``): the weight is read once, by one program per column tile. Or the
  config splits the rows (``GemvConfig.m_tile``): the grid's second axis gives each column tile
  ``ceil(M / m_tile)`` programs of 16 or 32 rows, each streaming the same weight rows (L2 serves
  the repeats) with a shorter dependent loop. H100, 2026-11-27: SmolLM2's 48-row o_proj and down
  3.6 / 5.7 -> 3.0 / 4.4 us, the bs-8 S = 5 cycle 1.17 -> 1.12 ms
  (``benchmarks/results/2026-11-27-h100-split-rows``).

Prologue (the GEMM's input rows, computed per program from the activations in L2): ``x``, or
rows ``ids`` of ``x`` (the embedding gather of layer 0; the LM head's ``logits_indices``); plus
``residual`` (the residual add); then RMSNorm, in one of two ways. One pass (FMA tiles, and dot
tiles over rows >= ``TWO_PASS_MAX_K``): each K chunk adds to the row's sum of squares and feeds
``x * norm_weight`` to the product, and the float32 sums are scaled by ``rstd`` after the loop.
Two passes (dot tiles over shorter rows): the sum of squares first, then the normalised chunk
feeding the product. On the H100 (2026-11-26) one pass took SmolLM2's one-row QKV from 4.3 to
3.6 us and the 8B shape's 6-row QKV and gate/up from 28 / 109 to 21 / 88 us (a first pass must
end before the weight stream starts), but SmolLM2's 6-row QKV and gate/up from 5.4 / 5.3 to
7.7 / 7.8 us (the row reduction inside a short tensor-core loop). Program 0 writes the rounded
sum (the new residual stream) once. EAGLE-3's mid layer takes two normalised inputs side by side,
``concat(norm(embedding rows), norm2(feature))``: its QKV prologue (``Prologue.x2``) streams the
first K1 weight columns against the gathered embedding rows and the rest against the feature,
each input with its own one-pass sum of squares and norm weight, and adds the two scaled sums;
FMA tiles stream both in one K loop (both chunks in flight at once), dot tiles in two loops
(their pipeline would stage both weight streams in shared memory). Or the second input's half
comes computed apart (``feature_product``, float32, before the first input is known) and the QKV
launch over the first input's columns adds it to its sums (``qkv_rope_store(addend=)``).

Rows made ready by the producer (``linear_add_norm`` -> ``NormedRows`` -> ``Prologue(normed=)``,
the decoder layer's default between its GEMMs): o_proj / down add their output to the residual
stream in their epilogue, write the sum (the new stream) and ``round(sum * norm_weight)`` of the
norm that follows, and one partial sum of squares per program and row. The consumer streams
those rows into its product with no pass of its own, loads the partials before its K loop and
scales its float32 sums by ``rstd`` after it (the one-pass rounding). H100 (2026-11-27,
``benchmarks/results/2026-11-27-h100-normed-rows``): SmolLM2's decode step 0.630 -> 0.606 ms and
6-token verify 0.730 -> 0.654 at bs 1; the 8B shape's 5.70 -> 5.61 / 6.02 -> 5.80 ms; and the
fused layers now win to 64 token rows (``ops.FusedPolicy``).

Epilogues (the kernels are in ``gemv_kernels``): ``linear_kernel`` (bias; optionally the greedy
argmax of the row, or the residual add and next norm's input above), ``qkv_rope_kernel`` (bias,
RoPE of q and k, k and v into the KV pool) and ``gate_up_kernel`` (SiLU-mul). The paired epilogues tile columns in pairs: rope pair ``(i, i + D/2)`` of a head, and
gate column ``i`` with up column ``I + i``; a tile's weight rows interleave the two halves
(row ``2p`` low, ``2p + 1`` high) so one product serves both, split apart afterwards.

Numerics (the ``updraft.ops`` contract): values are rounded to the activation dtype where the
unfused torch code rounds them: the residual sum; the GEMM output (bias added in float32 first,
one rounding, as cuBLAS's bias epilogue); each rotary product and sum; silu and the product;
logits are rounded to the dtype, then widened to float32 (``linear(...).float()``); the
two-pass norm rounds ``x * rstd``, then its product with the norm weight, as the unfused code.
The one-pass norm cannot: it rounds ``x * norm_weight`` (the GEMM's input must be in the dtype
for the tensor-core path) and ``rstd`` scales the float32 sum, a different rounding of the same
values, within an ulp of the dtype per element. What cannot be bitwise: that, the
GEMM's summation order (float32 partial sums in another order than cuBLAS's or the CPU's), and
the norm's sum of squares (chunked over K); tests therefore compare against float64 with
tolerances, and bitwise only where no sum or norm is involved.

Programmatic dependent launch (``triton_utils``): on sm_90+ each kernel here waits on the kernel
before it (``pdl_enter``) before touching any activation, and lets the next one launch after its
K loop (``pdl_release_late``); before the wait, a program of a GEMM over rows up to
``PREFETCH_MAX_K`` wide prefetches the first K chunk of its weight rows into L2.

Hazards: the argmax epilogue and nothing else uses a ticket counter (``Sem``): the last program
to finish reduces the per-program maxima and resets the counter to 0, so the counter must start
at 0 (``semaphore`` hands out a zeroed one, allocated outside graph capture); it counts one
program per column tile, so an argmax launch never splits its rows. Every epilogue indexes its
token rows from its row tile's first (``_rows``); "program 0" (the one writing the residual rows)
is column tile 0 of each row tile. KV slots, positions
and ids are not bounds-checked (a check would need a host sync).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
import triton

from updraft.ops import gemv_config, gemv_kernels, interpreting
from updraft.ops.gemv_config import GemvConfig
from updraft.ops.triton_utils import emulate_rne, pdl_opts

# ---- launchers -------------------------------------------------------------------------------
MAX_M = 64
ARGMAX_MAX_M = 16
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@functools.cache
def _semaphores(device: torch.device) -> torch.Tensor:
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("gemv: the argmax counter must be allocated before graph capture (run a warm-up forward)")
    return torch.zeros(64, dtype=torch.int32, device=device)


def semaphore(device: torch.device) -> torch.Tensor:
    """The argmax epilogue's ticket counter on ``device`` (0 between launches; one stream)."""
    return _semaphores(torch.device(device))[:1]


@dataclass(frozen=True)
class NormedRows:
    """The residual stream as ``linear_add_norm`` leaves it for the next RMSNorm (the consumer's
    ``Prologue(normed=...)``): ``stream`` [M, K] the rounded ``y + residual``; ``scaled`` [M, K]
    ``round(stream * norm_weight)``, the consumer's GEMM input; ``sumsq`` [M, P] float32 partial
    sums of ``stream^2``, one per producer program (column tile), which every consumer program
    adds in column order for ``rstd`` (no first pass over the rows, no atomics); ``eps`` the
    norm's. The consumer scales its float32 sums by ``rstd``: the one-pass norm's rounding."""

    stream: torch.Tensor
    scaled: torch.Tensor
    sumsq: torch.Tensor
    eps: float


@dataclass(frozen=True)
class Prologue:
    """The GEMM's input rows, built per program: rows ``ids`` of ``x`` (and of ``residual``) when
    given, else ``x`` itself; plus ``residual`` (rounded sum); then RMSNorm with ``norm_weight``
    and ``eps``. ``write_residual``: also return those rows after the add (the new residual
    stream: the sum, or the gathered rows of an embedding), written by program 0. ``x2`` (the
    QKV kernel only, with both norms and no residual): a second input ``[M, K2]`` normalised
    with ``norm_weight2`` (the same eps) and placed after the first."""

    norm_weight: torch.Tensor | None = None
    eps: float = 1e-6
    residual: torch.Tensor | None = None
    ids: torch.Tensor | None = None
    write_residual: bool = False
    #: EAGLE-3's second input (QKV only): the row is ``concat(the above, norm(x2) * norm_weight2)``
    x2: torch.Tensor | None = None
    norm_weight2: torch.Tensor | None = None
    #: the rows are ``normed.scaled`` (the ``x`` passed), already multiplied by the norm weight;
    #: ``rstd`` comes from ``normed.sumsq`` (nothing else may be set)
    normed: NormedRows | None = None


NO_PROLOGUE = Prologue()


def num_rows(x: torch.Tensor, pro: Prologue) -> int:
    return int(pro.ids.shape[0]) if pro.ids is not None else int(x.shape[0])


def supported(x: torch.Tensor, weight: torch.Tensor, pro: Prologue = NO_PROLOGUE, w_scale: torch.Tensor | None = None) -> bool:
    """Whether the small-M kernels cover these inputs: 1..64 token rows, one dtype throughout,
    rows with a contiguous last dim. With ``w_scale`` (``linear`` only): an FP8 (e4m3) weight
    and its float32 scale per row (``quantize_rows_fp8``)."""
    m = num_rows(x, pro)
    k2 = 0 if pro.x2 is None else int(pro.x2.shape[-1])
    if w_scale is None:
        wtype = weight.dtype == x.dtype
    else:
        wtype = (weight.dtype == FP8 and w_scale.dtype == torch.float32 and w_scale.dim() == 1
                 and w_scale.shape[0] == weight.shape[0] and w_scale.is_contiguous() and w_scale.device == x.device)
    ok = (
        x.dim() == 2 and weight.dim() == 2
        and 1 <= m <= MAX_M
        and x.dtype in DTYPES and wtype
        and x.shape[1] + k2 == weight.shape[1]
        and x.stride(1) == 1 and weight.stride(1) == 1
        and weight.device == x.device
    )
    if pro.x2 is not None:
        w2 = pro.norm_weight2
        ok = (ok and pro.x2.dim() == 2 and tuple(pro.x2.shape) == (m, k2) and pro.x2.dtype == x.dtype
              and pro.x2.stride(1) == 1 and pro.norm_weight is not None and pro.residual is None
              and not pro.write_residual and w2 is not None and w2.dtype == x.dtype and tuple(w2.shape) == (k2,))
    if pro.norm_weight is not None:
        ok = ok and pro.norm_weight.dtype == x.dtype and tuple(pro.norm_weight.shape) == (x.shape[1],)
    if pro.residual is not None:
        ok = ok and pro.residual.dtype == x.dtype and pro.residual.shape == x.shape and pro.residual.stride(1) == 1
    if pro.ids is not None:
        ok = ok and pro.ids.dim() == 1 and not pro.ids.is_floating_point()
    if pro.normed is not None:
        nr = pro.normed
        ok = (ok and nr.scaled is x and x.is_contiguous() and nr.sumsq.dtype == torch.float32
              and nr.sumsq.dim() == 2 and nr.sumsq.shape[0] == m and nr.sumsq.is_contiguous()
              and pro.norm_weight is None and pro.residual is None and pro.ids is None and not pro.write_residual
              and pro.x2 is None)
    return ok


def _prologue_args(x: torch.Tensor, pro: Prologue, m: int) -> tuple[tuple, tuple[int, int], dict, torch.Tensor | None]:
    """(args X, Ids, Res, ResOut, NW, Sq, NSQ, SIds; strides of x and residual; flags; new
    residual). ``ids`` may be strided (a column of a [B, W] id block)."""
    new_res = torch.empty(m, x.shape[1], dtype=x.dtype, device=x.device) if pro.write_residual else None
    res = pro.residual if pro.residual is not None else x
    sq = pro.normed.sumsq if pro.normed is not None else x
    ptrs = (x, pro.ids if pro.ids is not None else x, res, new_res if new_res is not None else x,
            pro.norm_weight if pro.norm_weight is not None else x, sq, sq.shape[1] if pro.normed is not None else 0,
            pro.ids.stride(0) if pro.ids is not None else 1)
    flags = dict(GATHER=pro.ids is not None, HAS_RES=pro.residual is not None, HAS_NORM=pro.norm_weight is not None,
                 WRITE_RES=pro.write_residual, PRE_RSTD=pro.normed is not None,
                 BLOCK_S=triton.next_power_of_2(sq.shape[1]) if pro.normed is not None else 1)
    return ptrs, (x.stride(0), res.stride(0)), flags, new_res


def _eps(pro: Prologue) -> float:
    return float(pro.normed.eps if pro.normed is not None else pro.eps)


#: The tensor-core path over rows shorter than this takes the two-pass norm prologue (see the
#: module docstring).
TWO_PASS_MAX_K = 2048


def _launch_opts(cfg: GemvConfig, bucket: int, x: torch.Tensor, k: int, w_size: int | None = None) -> dict:
    dtype = x.dtype
    dot_f32 = cfg.dot and interpreting() and dtype != torch.float32
    pdl = pdl_opts(x.device, "gemv", late=True)
    return dict(BLOCK_M=cfg.block_m(bucket), BLOCK_K=cfg.block_k, DOT=cfg.dot, DOT_F32=dot_f32,
                PREC="ieee" if dtype == torch.float32 or dot_f32 else "tf32", RNE=emulate_rne(),
                TWO_PASS=cfg.dot and k < TWO_PASS_MAX_K, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                PREFETCH=bool(pdl["PDL"]) and k <= PREFETCH_MAX_K, LINE=128 // (w_size or x.element_size()), **pdl)


#: Under PDL, a program of a GEMM with rows this short prefetches the first K chunk of its weight
#: rows into L2 before its wait. H100, 2026-11-26 (benchmarks/results/2026-11-26-h100-pdl):
#: SmolLM2 (K 576 / 1536) decode 0.640 -> 0.631 ms, verify 0.747 -> 0.728; the 8B shape (K >= 4096)
#: decode 5.708 -> 5.893 ms, and prefetching whole rows took it to 8.55 ms (L2 thrashed).
PREFETCH_MAX_K = 2048


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, pro: Prologue = NO_PROLOGUE, *,
           out_dtype: torch.dtype | None = None, argmax: bool = False, config: GemvConfig | None = None,
           exact_f32: bool = False, w_scale: torch.Tensor | None = None,
           ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``prologue(x) @ weight.T + bias`` -> (out [M, N] in ``out_dtype`` (default x's; values
    rounded to x's dtype either way, unless ``exact_f32``: float32 out, the float32 sums as they
    are, what ``x.float() @ weight.float().T`` computes), new residual or None, argmax [M] int64
    or None). ``w_scale``: ``weight`` is FP8 and row n's sum is multiplied by ``w_scale[n]``
    (float32, before the bias and the rounding): half the bytes of a bf16 weight streamed."""
    assert supported(x, weight, pro, w_scale) and pro.x2 is None, "gemv.linear: unsupported inputs"
    assert not exact_f32 or out_dtype in (None, torch.float32), "gemv.linear: exact_f32 writes float32"
    out_dtype = torch.float32 if exact_f32 else out_dtype
    m, (n, k) = num_rows(x, pro), weight.shape
    # the argmax's last program reduces an [M, programs] tile at once: LM-head rows only (<= 16)
    assert not argmax or m <= ARGMAX_MAX_M, f"gemv.linear: argmax over {m} rows (at most {ARGMAX_MAX_M})"
    # FP8 rows are tuned apart (their own cache key): a K chunk holds half the bytes
    cfg = config or gemv_config.lookup("linear", n, k, m, FP8 if w_scale is not None else x.dtype, x.device)
    if argmax and cfg.m_programs(m) > 1:  # the argmax's ticket counts one program per column tile
        cfg = dataclasses.replace(cfg, m_tile=0)
    out = torch.empty(m, n, dtype=out_dtype or x.dtype, device=x.device)
    nprog = triton.cdiv(n, cfg.block_n)
    if argmax:
        pmax = torch.empty(m, nprog, dtype=torch.float32, device=x.device)
        pidx = torch.empty(m, nprog, dtype=torch.int32, device=x.device)
        best = torch.empty(m, dtype=torch.int64, device=x.device)
        sem = semaphore(x.device)
    else:
        pmax = pidx = best = sem = out
    new_res = _launch_linear(x, weight, bias, pro, cfg, out, (pmax, pidx, best, sem), None, w_scale=w_scale,
                             argmax=argmax, exact_f32=exact_f32)
    return out, new_res, best if argmax else None


def linear_add_norm(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
                    eps: float, pro: Prologue = NO_PROLOGUE, *, config: GemvConfig | None = None,
                    stream_out: torch.Tensor | None = None) -> NormedRows:
    """``prologue(x) @ weight.T`` added to the residual stream ``residual`` [M, N], made ready for
    the RMSNorm (``norm_weight`` [N], ``eps``) that follows (``NormedRows``): the next GEMM's
    ``Prologue(normed=...)`` reads it without a pass of its own over the rows. The sum is rounded
    as the unfused ``round(round(y) + residual)``. ``residual`` and ``stream_out`` (where the sum
    lands, e.g. a column block of the EAGLE-3 features a verify captures; default a new tensor)
    may have any row stride."""
    assert supported(x, weight, pro) and pro.x2 is None, "gemv.linear_add_norm: unsupported inputs"
    m, (n, k) = num_rows(x, pro), weight.shape
    assert (residual.shape == (m, n) and residual.dtype == x.dtype and residual.stride(1) == 1
            and norm_weight.shape == (n,) and norm_weight.dtype == x.dtype), "gemv.linear_add_norm: unsupported inputs"
    assert stream_out is None or (stream_out.shape == (m, n) and stream_out.dtype == x.dtype
                                  and stream_out.stride(1) == 1), "gemv.linear_add_norm: unsupported stream_out"
    cfg = config or gemv_config.lookup("linear", n, k, m, x.dtype, x.device)
    nprog = triton.cdiv(n, cfg.block_n)
    stream = stream_out if stream_out is not None else torch.empty(m, n, dtype=x.dtype, device=x.device)
    scaled = torch.empty(m, n, dtype=x.dtype, device=x.device)  # contiguous: the next GEMM's rows
    sumsq = torch.empty(m, nprog, dtype=torch.float32, device=x.device)
    _launch_linear(x, weight, None, pro, cfg, stream, (stream,) * 4, (residual, norm_weight, scaled, sumsq))
    return NormedRows(stream, scaled, sumsq, float(eps))


def _launch_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pro: Prologue, cfg: GemvConfig,
                   out: torch.Tensor, argmax_bufs: tuple[torch.Tensor, ...], add_norm: tuple[torch.Tensor, ...] | None,
                   *, w_scale: torch.Tensor | None = None, argmax: bool = False, exact_f32: bool = False,
                   ) -> torch.Tensor | None:
    m, (n, k) = num_rows(x, pro), weight.shape
    ptrs, (sx, sr), flags, new_res = _prologue_args(x, pro, m)
    nprog = triton.cdiv(n, cfg.block_n)
    epi = add_norm if add_norm is not None else (out,) * 4
    gemv_kernels.linear_kernel[(nprog, cfg.m_programs(m))](
        *ptrs, weight, w_scale if w_scale is not None else out, bias if bias is not None else x, out, *argmax_bufs,
        *epi, m, n, k, sx, sr, weight.stride(0), out.stride(0), epi[0].stride(0), epi[2].stride(0), _eps(pro),
        BLOCK_N=cfg.block_n,
        BLOCK_P=min(1024, triton.next_power_of_2(nprog)), HAS_WSCALE=w_scale is not None, HAS_BIAS=bias is not None,
        ARGMAX=argmax, ADD_NORM=add_norm is not None, ROUND=not exact_f32, **flags,
        **_launch_opts(cfg, gemv_config.m_bucket(m), x, k, weight.element_size()),
    )
    return new_res


#: FP8 weights of ``linear(..., w_scale=)``: e4m3 (max 448), one float32 scale per weight row.
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def quantize_rows_fp8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``weight`` [N, K] as FP8 e4m3 with ``q[n] * scale[n]`` ~= ``weight[n]``, the
    row's largest magnitude mapped to 448 (an all-zero row gets scale 1). Rounding to nearest
    keeps 3 mantissa bits: a relative error of at most 2^-4 per weight."""
    w = weight.detach().float()
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (w / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q.contiguous(), scale.contiguous()


def qkv_rope_store(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pro: Prologue, *, num_heads: int,
                   num_kv_heads: int, head_dim: int, k_pool: torch.Tensor, v_pool: torch.Tensor, loc: torch.Tensor,
                   positions: torch.Tensor, cos_sin: torch.Tensor, config: GemvConfig | None = None,
                   addend: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The QKV projection of ``prologue(x)`` with q and k rotated (neox) at ``positions`` and the
    rotated k and v rows written to slots ``loc`` of ``k_pool`` / ``v_pool`` [slots, Hkv, D].
    ``addend`` [M, N] float32 (rows with a contiguous last dim): added to the float32 sums before
    the bias, as if ``weight`` had more columns whose product it is (EAGLE-3's feature half,
    ``feature_product``). Returns (qkv [M, (Hq + 2 Hkv) D]: rotated q | rotated k | v, new
    residual or None)."""
    assert qkv_supported(x, weight, pro, num_heads, num_kv_heads, head_dim, k_pool, v_pool, cos_sin)
    m, (n, k) = num_rows(x, pro), weight.shape
    assert addend is None or (addend.dtype == torch.float32 and tuple(addend.shape) == (m, n) and addend.stride(1) == 1
                              and addend.device == x.device), "gemv.qkv_rope_store: unsupported addend"
    add = addend if addend is not None else x
    cfg = config or gemv_config.lookup("qkv", n, k, m, x.dtype, x.device, head_dim)
    assert gemv_config.allowed("qkv", cfg, head_dim), f"qkv tile {cfg} does not divide head_dim {head_dim}"
    ptrs, (sx, sr), flags, new_res = _prologue_args(x, pro, m)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (num_heads + 2 * num_kv_heads) * (head_dim // 2 // cfg.block_n)
    x2 = pro.x2 if pro.x2 is not None else x
    nw2 = pro.norm_weight2 if pro.norm_weight2 is not None else x
    k1, k2 = x.shape[1], k - x.shape[1]
    opts = _launch_opts(cfg, gemv_config.m_bucket(m), x, k)
    if pro.x2 is not None:
        opts["TWO_PASS"] = False  # each half keeps its own sum of squares: one pass each
    gemv_kernels.qkv_rope_kernel[(grid, cfg.m_programs(m))](
        *ptrs, weight, bias if bias is not None else weight, out, k_pool, v_pool, loc, positions, cos_sin, x2, nw2, add,
        m, k1, k2, sx, sr, x2.stride(0), weight.stride(0), out.stride(0), k_pool.stride(0), k_pool.stride(1),
        v_pool.stride(0), v_pool.stride(1), cos_sin.stride(0), add.stride(0), _eps(pro), HQ=num_heads,
        HKV=num_kv_heads, HEAD_DIM=head_dim, BLOCK_P=cfg.block_n, HAS_BIAS=bias is not None, DUAL=pro.x2 is not None,
        HAS_ADD=addend is not None, **flags, **opts,
    )
    return out, new_res


def feature_product(x2: torch.Tensor, weight: torch.Tensor, norm_weight2: torch.Tensor, eps: float) -> torch.Tensor:
    """``norm2(x2) @ weight[:, K1:].T`` in float32 ([M, N]): the product of a dual-input QKV
    weight ``[N, K1 + K2]`` (``Prologue.x2``) with its second input, for a ``qkv_rope_store`` of the
    first input alone to add (``addend``). EAGLE-3's draft forwards compute it on a side stream
    before their tokens are known (``Eagle3Head.feature_qkv_for``)."""
    k2 = x2.shape[1]
    w2 = weight[:, weight.shape[1] - k2 :]
    out, _, _ = linear(x2, w2, None, Prologue(norm_weight=norm_weight2, eps=eps), exact_f32=True)
    return out


def qkv_supported(x: torch.Tensor, weight: torch.Tensor, pro: Prologue, num_heads: int, num_kv_heads: int,
                  head_dim: int, k_pool: torch.Tensor, v_pool: torch.Tensor, cos_sin: torch.Tensor) -> bool:
    """``supported`` plus: the QKV row layout, an even head dim, pools ``[slots, Hkv, D]`` of the
    activation dtype with contiguous rows, a ``[max_pos, D]`` cos/sin table of that dtype."""
    shape = (num_kv_heads, head_dim)
    return (
        supported(x, weight, pro)
        and weight.shape[0] == (num_heads + 2 * num_kv_heads) * head_dim
        and head_dim % 2 == 0 and head_dim // 2 >= 4
        and k_pool.dim() == v_pool.dim() == 3
        and tuple(k_pool.shape[1:]) == tuple(v_pool.shape[1:]) == shape
        and k_pool.dtype == v_pool.dtype == x.dtype
        and k_pool.stride(2) == 1 and v_pool.stride(2) == 1
        and cos_sin.dim() == 2 and cos_sin.shape[1] == head_dim and cos_sin.dtype == x.dtype and cos_sin.stride(1) == 1
    )


def gate_up_silu(x: torch.Tensor, weight: torch.Tensor, pro: Prologue = NO_PROLOGUE, *,
                 config: GemvConfig | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``silu(gate) * up`` of the gate/up projection ``[2I, K]`` of ``prologue(x)`` -> (act [M, I],
    new residual or None)."""
    assert supported(x, weight, pro) and pro.x2 is None and weight.shape[0] % 2 == 0, "gemv.gate_up_silu: unsupported inputs"
    m, k, inter = num_rows(x, pro), weight.shape[1], weight.shape[0] // 2
    cfg = config or gemv_config.lookup("gate_up", inter, k, m, x.dtype, x.device)
    ptrs, (sx, sr), flags, new_res = _prologue_args(x, pro, m)
    out = torch.empty(m, inter, dtype=x.dtype, device=x.device)
    gemv_kernels.gate_up_kernel[(triton.cdiv(inter, cfg.block_n), cfg.m_programs(m))](
        *ptrs, weight, out, m, k, inter, sx, sr, weight.stride(0), out.stride(0), _eps(pro), BLOCK_P=cfg.block_n,
        **flags, **_launch_opts(cfg, gemv_config.m_bucket(m), x, k),
    )
    return out, new_res

"""Probes for issue 14's kernel-count goal: two launches of the fused decoder layer folded into
their neighbours by splitting a GEMM's K over the programs and summing with float32 atomics.

A fused layer runs six launches (QKV, attention, split merge, o_proj, gate/up, down): 183 a SmolLM2
forward against the goal's 150. The merge folds tried so far lost (the decode kernel merging its
own splits; ``merge_fold_probe.py``: every o_proj program redoing the whole merge, 16-18 us a
layer against 3.7-4.2). Both remaining folds split K instead, so no program repeats another's work:

* ``mlp``: gate/up + SiLU-mul + down in one launch. Program ``p`` computes ``act = silu(gate) *
  up`` for its ``BLOCK_P`` intermediate columns (as ``gate_up_kernel``, from the o_proj's
  ``NormedRows``), multiplies them by its ``BLOCK_P`` rows of the TRANSPOSED down weight ``[I, H]``
  (contiguous) and adds the ``[M, H]`` partial into a float32 accumulator. Against
  ``gemv.gate_up_silu`` + ``gemv.linear_add_norm``.
* ``oproj``: the split merge + o_proj in one launch. Program ``(h, c)`` merges head ``h``'s splits
  (one head: the merge is repeated only across the ``c`` column tiles) and adds its product with
  ``W_o[c tile, h's columns]`` into the float32 residual stream. Against ``merge_splits`` +
  ``gemv.linear_add_norm``.

* ``mla_uv`` (issue 15): MLA's split merge + the absorbed V up-projection in one launch. The
  DeepSeek layer merges the latent partials (``merge_splits``), multiplies each head's merged
  latent row by its ``w_vc`` [kv_lora, v_head] (``torch.bmm``) and copies the transposed result
  into o_proj's rows: three launches. The product is per head, so program ``(h, v tile, token
  tile)`` merges head ``h``'s splits a latent chunk at a time and multiplies at once, writing o_proj's
  rows: one launch, no atomics (deterministic); the merge repeats per ``v`` tile only. Against
  ``merge_splits`` + ``torch.bmm`` + the copy, at DeepSeek-V2-Lite's 16 heads and V3's 128.

The two Llama folds together would make four launches a layer (123 a SmolLM2 forward). Costs the probes cannot
show: the sums' order, so their last bits, vary run to run (``gemv`` has so far refused atomics for
that); the accumulators must be zeroed (``mlp`` here: each launch clears a slice of the one its
successor adds into, triple-buffered, since the buffer the launch before read cannot be cleared
until it has finished); the residual add and the next norm's statistics move into the next GEMM's
prologue (a pass over a float32 row: not timed here).

If both pay, the layer they make (four launches): the residual stream lives in two float32
buffers A and B per forward. QKV(l) reads A (rounded to the activation dtype: the stream; its
norm from the row itself; program 0 writes the rounded rows into B as the o_proj's starting sum,
and into a capture buffer where EAGLE-3 takes the layer's output), attention(l) writes its split
partials, the o_proj fold adds into B and clears A (QKV(l), its last reader, has finished), the
MLP fold reads B (its own norm), adds its partials into A and program 0 adds B's rounded rows, and
QKV(l + 1) reads A. The backend hands its split partials to the layer instead of merging them,
which moves the merge out of ``forward_stored``: an interface change to make only on a measured
win.

Timed as CUDA graphs of ``copies`` back-to-back launches over distinct weight copies (weights from
memory, as in a step), PDL as in production; each fold over a few tiles. It pays where a fold beats
production by more than the prologue it moves. Correctness: every variant against float64.
``--smoke``: tiny shapes under the Triton interpreter (CPU); ``--compile-check``: both kernels
compiled for sm_90 at the sweep's smallest and largest tiles (no GPU; a process without ``TRITON_INTERPRET``).

    python benchmarks/fold_probe.py --out results/fold_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# the interpreter switch is read when a kernel is defined; --compile-check compiles them instead
if not torch.cuda.is_available() and "--compile-check" not in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from attention_bench import meta  # noqa: E402

from updraft.attention.triton_kernels.merge import merge_splits  # noqa: E402
from updraft.ops import gemv, interpreting  # noqa: E402
from updraft.ops.activation import silu_mul  # noqa: E402
from updraft.ops.gemv_config import graph_seconds  # noqa: E402
from updraft.ops.gemv_kernels import _halves, _input_product, _prefetch_rows, _product, gate_up_rows  # noqa: E402
from updraft.ops.gemv_merge import merged_head  # noqa: E402
from updraft.ops.triton_utils import emulate_rne, pdl_enter, pdl_opts, pdl_release_late, round_to  # noqa: E402

#: (name, hidden, intermediate, q heads, head dim, token rows)
SHAPES = [("smollm2", 576, 1536, 9, 64, (1, 6, 8)), ("llama-8b", 4096, 14336, 32, 128, (1, 6))]
SPLITS = 64  # captured KV splits (``live`` of them hold keys: ~256 / 1k / 4k tokens at 4 / 16 / 64)
Tile = tuple[int, int, int, int]
Variant = tuple[Callable[[int], None], Callable[[], torch.Tensor]]  # (run weight copy i, copy 0's output)


@triton.jit(do_not_specialize=["M"])
def mlp_fold_kernel(X, Sq, NSQ, W, WdT, Acc, Zero, M, K, INTER, zchunk, ztotal, eps,
                    BLOCK_P: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr,
                    BLOCK_S: tl.constexpr, DOT: tl.constexpr, DOT_F32: tl.constexpr, PREC: tl.constexpr,
                    RNE: tl.constexpr, PDL: tl.constexpr, PREFETCH: tl.constexpr, LINE: tl.constexpr):
    """Program = ``BLOCK_P`` intermediate columns: their gate/up rows against the normed rows,
    SiLU-mul, then their rows of ``WdT`` [I, K] into ``Acc`` [M, K] (float32, atomics); and
    ``Zero``'s elements ``[pid * zchunk, (pid + 1) * zchunk)`` cleared for the next launch."""
    pid = tl.program_id(0)
    ri, wrow = gate_up_rows(BLOCK_P, INTER)  # production's row layout, so _halves splits them alike
    if PREFETCH:
        _prefetch_rows(W, wrow, ri < INTER, K, tl.minimum(K, BLOCK_K), LINE)
    pdl_enter(PDL)
    z = pid * zchunk + tl.arange(0, 1024)
    for z0 in range(0, zchunk, 1024):
        tl.store(Zero + z0 + z, 0.0, mask=(z0 + z < (pid + 1) * zchunk) & (z0 + z < ztotal))
    acc, m, mmask = _input_product(X, X, X, X, X, Sq, NSQ, 1, W, wrow, ri < INTER, M, K, K, K, K, eps,
                                   2 * BLOCK_P, BLOCK_M, BLOCK_K, BLOCK_S, False, False, False, False, True, DOT,
                                   DOT_F32, PREC, RNE, False)
    gate, up = _halves(acc, BLOCK_P, BLOCK_M)
    dt = X.dtype.element_ty
    act = silu_mul(round_to(gate, dt, RNE), round_to(up, dt, RNE), dt, RNE)  # [BLOCK_P, BLOCK_M]
    i = pid * BLOCK_P + tl.arange(0, BLOCK_P)
    act = tl.where((i < INTER)[:, None] & mmask[None, :], act, 0.0).to(dt)
    for h0 in range(0, K, BLOCK_H):
        h = h0 + tl.arange(0, BLOCK_H)
        hmask = h < K
        wd = tl.load(WdT + i[:, None].to(tl.int64) * K + h[None, :], mask=(i < INTER)[:, None] & hmask[None, :],
                     other=0.0)  # [BLOCK_P, BLOCK_H]
        part = _product(tl.trans(wd), tl.trans(act), tl.zeros([BLOCK_H, BLOCK_M], tl.float32), DOT, DOT_F32, PREC)
        tl.atomic_add(Acc + m[None, :].to(tl.int64) * K + h[:, None], part, mask=hmask[:, None] & mmask[None, :],
                      sem="relaxed")
    pdl_release_late(PDL)


@triton.jit(do_not_specialize=["M"])
def oproj_fold_kernel(MidO, MidLse, W, Acc, M, N, s_mt, s_mh, s_ms, s_lt, s_lh, num_splits,
                      D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr,
                      ALL_S: tl.constexpr, DOT: tl.constexpr, DOT_F32: tl.constexpr, PREC: tl.constexpr,
                      RNE: tl.constexpr, PDL: tl.constexpr):
    """Program ``(h, c)``: head ``h``'s splits merged for every token row (``merge_splits``'
    weights, rounded to W's dtype as its output is), times ``W[c tile, h * D : (h + 1) * D]``,
    added into ``Acc`` [M, N] (float32, atomics)."""
    h = tl.program_id(0)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    d = tl.arange(0, D)
    w = tl.load(W + n[:, None].to(tl.int64) * (tl.num_programs(0) * D) + h * D + d[None, :], mask=nmask[:, None],
                other=0.0)  # [BLOCK_N, D], loaded before the wait: weights only
    pdl_enter(PDL)
    m = tl.arange(0, BLOCK_M)
    mmask = m < M
    o = round_to(merged_head(MidO, MidLse, h, m, mmask, s_mt, s_mh, s_ms, s_lt, s_lh, num_splits, D, BLOCK_M, BLOCK_S,
                             ALL_S), W.dtype.element_ty, RNE)
    y = _product(w, o, tl.zeros([BLOCK_N, BLOCK_M], tl.float32), DOT, DOT_F32, PREC)
    tl.atomic_add(Acc + m[None, :].to(tl.int64) * N + n[:, None], y, mask=nmask[:, None] & mmask[None, :],
                  sem="relaxed")
    pdl_release_late(PDL)


@triton.jit(do_not_specialize=["T"])
def mla_uv_fold_kernel(MidO, MidLse, Wvc, Out, T, s_mt, s_mh, s_ms, s_lt, s_lh, num_splits, s_ot,
                       DL: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr, ALL_S: tl.constexpr, DOT: tl.constexpr,
                       DOT_F32: tl.constexpr, PREC: tl.constexpr, RNE: tl.constexpr, PDL: tl.constexpr):
    """Program ``(h, v tile, token tile)``: head ``h``'s latent splits merged (``merge_splits``'
    weights; each latent value rounded to W's dtype, as the merge's output is) chunk by chunk and
    multiplied by ``Wvc[h, chunk, v tile]``; the product rounded into ``Out[t, h * DV + v]``."""
    h = tl.program_id(0)
    v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    t = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    tmask = t < T
    pdl_enter(PDL)
    sa = tl.arange(0, ALL_S)
    lbase = MidLse + t.to(tl.int64) * s_lt + h * s_lh
    lse = tl.load(lbase[:, None] + sa[None, :], mask=tmask[:, None] & (sa < num_splits)[None, :], other=float("-inf"))
    mx = tl.max(lse, 1)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    den = tl.sum(tl.where(lse > float("-inf"), tl.exp2(lse - mx[:, None]), 0.0), 1)
    den = tl.where(den == 0.0, 1.0, den)
    acc = tl.zeros([BLOCK_V, BLOCK_M], tl.float32)
    obase = MidO + t[:, None].to(tl.int64) * s_mt + h * s_mh
    dt = Wvc.dtype.element_ty
    for d0 in range(0, DL, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        o = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for s in range(0, num_splits):
            ls = tl.load(lbase + s, mask=tmask, other=float("-inf"))
            live = ls > float("-inf")
            part = tl.load(obase + s * s_ms + d[None, :], mask=live[:, None], other=0.0)
            o += tl.where(live, tl.exp2(ls - mx), 0.0)[:, None] * part
        o = round_to(o / den[:, None], dt, RNE)
        wv = tl.load(Wvc + h * DL * DV + d[:, None] * DV + v[None, :])  # [BLOCK_D, BLOCK_V]
        acc = _product(tl.trans(wv), o, acc, DOT, DOT_F32, PREC)  # [BLOCK_V, BLOCK_M]
    tl.store(Out + t[None, :].to(tl.int64) * s_ot + h * DV + v[:, None], round_to(acc, dt, RNE),
             mask=tmask[None, :])
    pdl_release_late(PDL)


def _dot_opts(m: int, dtype: torch.dtype, device: torch.device) -> dict[str, object]:
    dot = m > 2
    dot_f32 = dot and interpreting() and dtype != torch.float32
    return dict(BLOCK_M=16 if dot else triton.next_power_of_2(m), DOT=dot, DOT_F32=dot_f32,
                PREC="ieee" if dtype == torch.float32 or dot_f32 else "tf32", RNE=emulate_rne(),
                **pdl_opts(device, "gemv", late=True))


def _mlp_fold(mid: gemv.NormedRows, w_gu: torch.Tensor, wd_t: torch.Tensor, acc: torch.Tensor, zero: torch.Tensor,
              tile: Tile) -> None:
    p, k, h, warps = tile
    m, hid = mid.scaled.shape
    inter = wd_t.shape[0]
    nprog = triton.cdiv(inter, p)
    opts = _dot_opts(m, mid.scaled.dtype, mid.scaled.device)
    mlp_fold_kernel[(nprog,)](
        mid.scaled, mid.sumsq, mid.sumsq.shape[1], w_gu, wd_t, acc, zero, m, hid, inter,
        triton.cdiv(m * hid, nprog), m * hid, mid.eps, BLOCK_P=p, BLOCK_K=k, BLOCK_H=h,
        BLOCK_S=triton.next_power_of_2(mid.sumsq.shape[1]), PREFETCH=bool(opts["PDL"]) and hid <= gemv.PREFETCH_MAX_K,
        LINE=128 // w_gu.element_size(), num_warps=warps, **opts)


def _oproj_fold(mid_o: torch.Tensor, mid_lse: torch.Tensor, w_o: torch.Tensor, acc: torch.Tensor, tile: Tile) -> None:
    bn, bs, _, warps = tile
    m, heads, splits, d = mid_o.shape
    oproj_fold_kernel[(heads, triton.cdiv(w_o.shape[0], bn))](
        mid_o, mid_lse, w_o, acc, m, w_o.shape[0], mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
        mid_lse.stride(0), mid_lse.stride(1), splits, D=d, BLOCK_N=bn, BLOCK_S=bs,
        ALL_S=triton.next_power_of_2(splits), num_warps=warps, **_dot_opts(m, w_o.dtype, w_o.device))


def _mla_uv_fold(mid_o: torch.Tensor, mid_lse: torch.Tensor, w_vc: torch.Tensor, out: torch.Tensor, tile: Tile) -> None:
    bv, bd, _, warps = tile
    t, heads, splits, dl = mid_o.shape
    opts = _dot_opts(t, w_vc.dtype, w_vc.device)
    mla_uv_fold_kernel[(heads, triton.cdiv(w_vc.shape[2], bv), triton.cdiv(t, opts["BLOCK_M"]))](
        mid_o, mid_lse, w_vc, out, t, mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0),
        mid_lse.stride(1), splits, out.stride(0), DL=dl, DV=w_vc.shape[2], BLOCK_V=bv, BLOCK_D=bd,
        ALL_S=triton.next_power_of_2(splits), num_warps=warps, **opts)


def _normed(m: int, hid: int, nw: torch.Tensor, gen: torch.Generator) -> gemv.NormedRows:
    """Rows as an o_proj's ``linear_add_norm`` leaves them (here of ``o @ I + x``)."""
    dtype, dev = nw.dtype, nw.device
    x = torch.randn(m, hid, generator=gen).to(dtype).to(dev)
    o = torch.randn(m, hid, generator=gen).to(dtype).to(dev)
    return gemv.linear_add_norm(o, torch.eye(hid, dtype=dtype, device=dev), x, nw, 1e-5)


def mlp_variants(m: int, hid: int, inter: int, copies: int, tiles: list[Tile], nw: torch.Tensor,
                 gen: torch.Generator) -> tuple[dict[str, Variant], torch.Tensor]:
    """The MLP's variants at ``m`` rows and its float64 output (from the same normed rows)."""
    dtype, dev = nw.dtype, nw.device
    ws = []
    for _ in range(copies):
        w_gu = (torch.randn(2 * inter, hid, generator=gen) / hid**0.5).to(dtype).to(dev)
        w_d = (torch.randn(hid, inter, generator=gen) / inter**0.5).to(dtype).to(dev)
        ws.append((w_gu, w_d, w_d.t().contiguous()))
    mid = _normed(m, hid, nw, gen)
    rstd = torch.rsqrt(mid.sumsq.double().sum(1, keepdim=True) / hid + mid.eps)
    g, u = ((mid.scaled.double() * rstd) @ ws[0][0].double().T).chunk(2, dim=1)
    ref = (torch.nn.functional.silu(g) * u) @ ws[0][1].double().T
    accs = [torch.zeros(m, hid, dtype=torch.float32, device=dev) for _ in range(3)]

    def prod(i: int) -> None:
        w_gu, w_d, _ = ws[i % copies]
        act, _ = gemv.gate_up_silu(mid.scaled, w_gu, gemv.Prologue(normed=mid))
        accs[0] = gemv.linear_add_norm(act, w_d, mid.stream, nw, mid.eps).stream

    def prod_out() -> torch.Tensor:
        prod(0)
        return accs[0].double() - mid.stream.double()

    out: dict[str, Variant] = {"gate_up + down": (prod, prod_out)}
    for tile in tiles:
        def fold(i: int, tile: Tile = tile) -> None:
            _mlp_fold(mid, ws[i % copies][0], ws[i % copies][2], accs[i % 3], accs[(i + 1) % 3], tile)

        def fold_out(tile: Tile = tile) -> torch.Tensor:
            accs[0] = torch.zeros_like(mid.stream, dtype=torch.float32)
            _mlp_fold(mid, ws[0][0], ws[0][2], accs[0], accs[1], tile)
            return accs[0].double()

        out["fold p{} k{} h{} w{}".format(*tile)] = (fold, fold_out)
    return out, ref


def oproj_variants(m: int, hid: int, heads: int, d: int, live: int, copies: int, tiles: list[Tile],
                   nw: torch.Tensor, gen: torch.Generator) -> tuple[dict[str, Variant], torch.Tensor]:
    """merge + o_proj at ``m`` rows, ``live`` of ``SPLITS`` splits holding keys, and its float64 output."""
    dtype, dev = nw.dtype, nw.device
    ws = [(torch.randn(hid, heads * d, generator=gen) / (heads * d) ** 0.5).to(dtype).to(dev) for _ in range(copies)]
    mid_o = torch.randn(m, heads, SPLITS, d, generator=gen).to(dev)
    lse = torch.randn(m, heads, SPLITS, generator=gen) * 3
    lse[:, :, live:] = float("-inf")
    mid_lse = lse.to(dev)
    wts = torch.softmax(lse.double() * torch.log(torch.tensor(2.0, dtype=torch.float64)), -1)
    merged = (wts[..., None] * mid_o.double().cpu()).sum(2).reshape(m, heads * d).to(dtype).double()
    ref = merged.to(dev) @ ws[0].double().T
    x = torch.empty(m, heads, d, dtype=dtype, device=dev)
    stream = torch.randn(m, hid, generator=gen).to(dtype).to(dev)
    box: list[torch.Tensor] = [stream]
    acc = torch.zeros(m, hid, dtype=torch.float32, device=dev)

    def prod(i: int) -> None:
        merge_splits(mid_o, mid_lse, x)
        box[0] = gemv.linear_add_norm(x.view(m, heads * d), ws[i % copies], stream, nw, 1e-5).stream

    def prod_out() -> torch.Tensor:
        prod(0)
        return box[0].double() - stream.double()

    out: dict[str, Variant] = {"merge + o_proj": (prod, prod_out)}
    for tile in tiles:
        def fold(i: int, tile: Tile = tile) -> None:
            _oproj_fold(mid_o, mid_lse, ws[i % copies], acc, tile)

        def fold_out(tile: Tile = tile) -> torch.Tensor:
            acc.zero_()
            _oproj_fold(mid_o, mid_lse, ws[0], acc, tile)
            return acc.double()

        out[f"fold n{tile[0]} s{tile[1]} w{tile[3]}"] = (fold, fold_out)
    return out, ref


def mla_uv_variants(t: int, heads: int, splits: int, live: int, copies: int, tiles: list[Tile], dtype: torch.dtype,
                    dev: torch.device, gen: torch.Generator) -> tuple[dict[str, Variant], torch.Tensor]:
    """MLA's merge + V up-projection at ``t`` token rows (``live`` of ``splits`` splits hold keys;
    DeepSeek's kv_lora 512, v_head 128) and its float64 output [t, heads * 128]."""
    dl, dv = 512, 128
    ws = [(torch.randn(heads, dl, dv, generator=gen) / dl**0.5).to(dtype).to(dev) for _ in range(copies)]
    mid_o = torch.randn(t, heads, splits, dl, generator=gen).to(dev)
    lse = torch.randn(t, heads, splits, generator=gen) * 3
    lse[:, :, live:] = float("-inf")
    mid_lse = lse.to(dev)
    wts = torch.softmax(lse.double() * torch.log(torch.tensor(2.0, dtype=torch.float64)), -1)
    merged = (wts[..., None] * mid_o.double().cpu()).sum(2).to(dtype).double().to(dev)  # [t, H, dl], rounded
    ref = torch.einsum("thd,hdv->thv", merged, ws[0].double()).reshape(t, heads * dv)
    lat = torch.empty(t, heads, dl, dtype=dtype, device=dev)
    out = torch.empty(t, heads * dv, dtype=dtype, device=dev)
    box: list[torch.Tensor] = [out]

    def prod(i: int) -> None:  # the DeepSeek layer's three launches
        merge_splits(mid_o, mid_lse, lat)
        o = torch.bmm(lat.transpose(0, 1), ws[i % copies])
        box[0] = o.transpose(0, 1).reshape(t, heads * dv)

    def prod_out() -> torch.Tensor:
        prod(0)
        return box[0].double()

    found: dict[str, Variant] = {"merge + bmm + copy": (prod, prod_out)}
    for tile in tiles:
        def fold(i: int, tile: Tile = tile) -> None:
            _mla_uv_fold(mid_o, mid_lse, ws[i % copies], out, tile)

        def fold_out(tile: Tile = tile) -> torch.Tensor:
            _mla_uv_fold(mid_o, mid_lse, ws[0], out, tile)
            return out.double()

        found[f"fold v{tile[0]} d{tile[1]} w{tile[3]}"] = (fold, fold_out)
    return found, ref


def mla_uv_tiles(cuda: bool) -> list[Tile]:
    """(BLOCK_V, BLOCK_D, unused, warps): a narrower v tile repeats the merge, with more programs."""
    if not cuda:
        return [(16, 16, 0, 4)]
    return [(v, d, 0, w) for v in (32, 64, 128) for d in (32, 64) for w in (4, 8)]


def mlp_tiles(cuda: bool, hid: int, m: int) -> list[Tile]:
    """(BLOCK_P, BLOCK_K, BLOCK_H, warps); tensor-core tiles (past 2 rows) need BLOCK_P >= 16."""
    ps = (8, 16, 32) if m <= 2 else (16, 32)
    if hid > 1024:  # fewer, wider programs: each adds an [M, H] partial, 7.3M atomics at 8 columns
        ps = (32, 64)
    if not cuda:
        return [(ps[0], 32, 32, 4)]
    ks = (64, 128) if hid <= 1024 else (128, 256)
    return [(p, k, h, w) for p in ps for k in ks for h in (64, 128) for w in (4, 8)]


def oproj_tiles(cuda: bool, hid: int) -> list[Tile]:
    """(BLOCK_N, BLOCK_S, unused, warps)."""
    if not cuda:
        return [(16, 8, 0, 4)]
    ns = (32, 64, 128) if hid <= 1024 else (128, 256)
    return [(n, s, 0, w) for n in ns for s in (8, 16) for w in (4, 8)]


#: MLA cases: (name, heads, token rows (decode: one a request), captured splits, live splits)
MLA_CASES = [("v2-lite", 16, 8, 32, 32), ("v2-lite", 16, 8, 32, 4), ("v2-lite", 16, 64, 8, 8), ("v3", 128, 8, 32, 32),
             ("v3", 128, 1, 32, 32)]


def cases(cuda: bool, probes: list[str], nw_of: Callable[[int], torch.Tensor], gen: torch.Generator,
          ) -> Iterator[tuple[dict[str, object], dict[str, Variant], torch.Tensor, int]]:
    """(row labels, variants, float64 reference, copies) for every probe, shape and row count."""
    if "mla_uv" in probes:
        dtype, dev = nw_of(8).dtype, nw_of(8).device
        for name, heads, t, splits, live in MLA_CASES if cuda else [("tiny", 2, 1, 4, 3), ("tiny", 2, 3, 4, 3)]:
            copies = 16 if cuda else 2
            v, ref = mla_uv_variants(t, heads, splits, live, copies, mla_uv_tiles(cuda), dtype, dev, gen)
            yield dict(probe="mla_uv", shape=name, rows=t, live_splits=live), v, ref, copies
    shapes = SHAPES if cuda else [("tiny", 64, 96, 4, 16, (1, 6))]
    for name, hid, inter, heads, d, ms in shapes:
        copies = (64 if hid <= 1024 else 4) if cuda else 2
        for m in ms:
            if "mlp" in probes:
                v, ref = mlp_variants(m, hid, inter, copies, mlp_tiles(cuda, hid, m), nw_of(hid), gen)
                yield dict(probe="mlp", shape=name, rows=m), v, ref, copies
            if "oproj" in probes:
                for live in (4, 16, 64) if cuda else (3,):
                    v, ref = oproj_variants(m, hid, heads, d, live, copies, oproj_tiles(cuda, hid), nw_of(hid), gen)
                    yield dict(probe="oproj", shape=name, rows=m, live_splits=live), v, ref, copies


def compile_check() -> int:
    """Both kernels compiled for sm_90 (bf16; FMA tiles at one row, tensor-core tiles at 16) at the
    smallest and the largest tile the GPU run sweeps per shape (the largest is where registers
    spill or shared memory runs out): the interpreter accepts code the compiler rejects."""
    from triton.backends.compiler import GPUTarget

    from updraft.attention.triton_kernels.compile_check import _compile

    target = GPUTarget("cuda", 90, 32)
    common = dict(DOT_F32=False, PREC="tf32", RNE=False)
    done = 0
    for _, hid, _, _, d, _ in SHAPES:
        for bm, dot in ((1, False), (16, True)):
            tiles = mlp_tiles(True, hid, 1 if bm == 1 else 16)
            for p, k, h, warps in (tiles[0], tiles[-1]):
                consts = dict(BLOCK_P=p, BLOCK_M=bm, BLOCK_K=k, BLOCK_H=h, BLOCK_S=16, DOT=dot, PREFETCH=hid <= 2048,
                              LINE=64, **common)
                ptrs = dict(X="bf16", Sq="fp32", W="bf16", WdT="bf16", Acc="fp32", Zero="fp32")
                _compile(mlp_fold_kernel, target, ptrs, consts, warps, floats=("eps",))
                done += 1
            tiles = oproj_tiles(True, hid)
            for n, bs, _, warps in (tiles[0], tiles[-1]):
                consts = dict(D=d, BLOCK_N=n, BLOCK_M=bm, BLOCK_S=bs, ALL_S=SPLITS, DOT=dot, **common)
                _compile(oproj_fold_kernel, target, dict(MidO="fp32", MidLse="fp32", W="bf16", Acc="fp32"), consts,
                         warps)
                done += 1
    for bm, dot in ((1, False), (16, True)):
        tiles = mla_uv_tiles(True)
        for bv, bd, _, warps in (tiles[0], tiles[-1]):
            consts = dict(DL=512, DV=128, BLOCK_M=bm, BLOCK_V=bv, BLOCK_D=bd, ALL_S=32, DOT=dot, **common)
            _compile(mla_uv_fold_kernel, target, dict(MidO="fp32", MidLse="fp32", Wvc="bf16", Out="bf16"), consts, warps)
            done += 1
    print(f"ok {done} specializations compiled for sm_90")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", default="mlp,oproj,mla_uv", help="comma-separated: mlp, oproj, mla_uv")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes under the Triton interpreter (CPU)")
    ap.add_argument("--compile-check", action="store_true", help="compile both kernels for sm_90 (no GPU)")
    args = ap.parse_args(argv)
    if args.compile_check:
        return compile_check()
    probes = args.probes.split(",")
    if bad := sorted(set(probes) - {"mlp", "oproj", "mla_uv"}):
        raise ValueError(f"--probes: {', '.join(bad)} (allowed: mlp, oproj, mla_uv)")
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("fold_probe: needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(0)

    def nw_of(hid: int) -> torch.Tensor:
        return (1 + 0.1 * torch.randn(hid, generator=gen)).to(dtype).to(dev)

    rows: list[dict[str, object]] = []
    summary: list[str] = []
    info = meta(dev)
    for labels, variants, ref, copies in cases(cuda, probes, nw_of, gen):
        timed: dict[str, float] = {}
        for vname, (run, result) in variants.items():
            run(0)  # compile
            err = float((result() - ref).abs().max() / ref.abs().max())
            row: dict[str, object] = {**labels, "variant": vname, "rel_err": err}
            if cuda:
                calls = [0]

                def rep(run: Callable[[int], None] = run) -> None:
                    run(calls[0])
                    calls[0] += 1

                timed[vname] = graph_seconds(rep, copies) * 1e6
                row["us"] = timed[vname]
            rows.append(row)
            print(" ".join(f"{v}" for v in labels.values()), f"{vname:24s} {row.get('us', float('nan')):8.2f} us  "
                  f"rel err {err:.1e}", flush=True)
        if timed:
            base = next(iter(timed))
            best = min((k for k in timed if k != base), key=timed.__getitem__)
            summary.append(" ".join(f"{k}={v}" for k, v in labels.items())
                           + f": {base} {timed[base]:.2f} us, best {best} {timed[best]:.2f} us")
        if args.out is not None:  # after every case: a run cut short by its time limit keeps what it measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"meta": info, "rows": rows, "summary": summary}, indent=1))
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where the MLA decode kernel's fixed time goes: a timeline of its programs (run it on the GPU machine).

Issue 15 asks MLA decode at bs 8 / 8k for >= 70% of the copy bandwidth. From 8k to 32k the decode
kernel adds its bytes at the copy bandwidth, so what keeps 8k at ~61% is a fixed ~8 us inside the
kernel (the profiler's kernel time, launch excluded). This probe runs the decode kernel's body
with timestamps and says which part that is:

* ``start``: when each program began, after the first (``%globaltimer``, ns, one clock for the GPU);
* ``ready``: a program's wait for its query rows and its first block of slots (the dependent loads
  before the first latent tile can be asked for);
* ``loop``: the key loop, from ready to the last tile's softmax update;
* ``tail``: the last program's end after the median program's end (uneven progress over SMs).

A lever rides along: the slots of the first two blocks loaded in one round trip, and the loop
carrying them two blocks ahead (the pipeline issues two tiles before its first wait).

Variants: the attention body with those stamps, with only the first and last (to see what the
stamps cost), and a stream-only body (same grid, slots and tile loads, a column sum in place of
the two dots and the softmax: what the memory system gives this grid). Each is also timed by
CUDA events over ``--launches`` back-to-back launches, next to the production kernel
(``mla_decode_attention`` + its merge).

    python benchmarks/mla_timeline_probe.py --out $OUT/mla_timeline.json
    python benchmarks/mla_timeline_probe.py --smoke   # CPU interpreter: plumbing only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--launches", type=int, default=20, help="back-to-back launches per event timing")
    p.add_argument("--shapes", default="8/8192/16,8/32768/16,8/8192/32,64/8192/2",
                   help="bs/context/splits, comma-separated")
    p.add_argument("--smoke", action="store_true", help="tiny shapes under the Triton interpreter")
    return p.parse_args(argv)


def _stamp_helpers(interpret: bool) -> tuple[Any, Any]:
    """``stamp`` (``%globaltimer`` once its operand is in a register) and ``smid`` for the probe kernel;
    zeros in the interpreter, which has no PTX, so the smoke run checks the body's arithmetic (``tl``
    bound as a module global: jitted code looks names up there)."""
    global tl
    import triton
    import triton.language as tl

    if interpret:
        @triton.jit
        def stamp(dep):
            return dep.to(tl.int64) * 0

        @triton.jit
        def smid(dep):
            return dep * 0
    else:
        @triton.jit
        def stamp(dep):
            """``%globaltimer`` once ``dep`` (an int32 scalar) is in a register: the read waits for it."""
            return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [dep], dtype=tl.int64,
                                             is_pure=False, pack=1)

        @triton.jit
        def smid(dep):
            return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [dep], dtype=tl.int32, is_pure=False,
                                             pack=1)

    return stamp, smid


def kernels() -> Any:
    """The probe kernel, defined after TRITON_INTERPRET is settled (its helpers as module globals,
    where both the compiler and the interpreter look names up)."""
    global tl, stamp, smid, latent_block, load_query_rows, store_rows, block_slots, first_slots, split_len
    import triton
    import triton.language as tl

    from updraft.attention.triton_kernels import interpreting
    from updraft.attention.triton_kernels.mla_common import (
        latent_block,
        load_query_rows,
        store_rows,
    )
    from updraft.attention.triton_kernels.slots import block_slots, first_slots, split_len

    stamp, smid = _stamp_helpers(interpreting())

    @triton.jit
    def timeline_kernel(Q, KPool, Out, MidO, MidLse, ReqToToken, ReqPoolIdx, SeqLens, Times,
                        stride_qt, stride_qh, stride_ks, stride_rt, stride_mt, stride_mh, stride_ms, stride_lt,
                        stride_lh, scale_log2, num_splits,
                        NUM_HEADS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DV: tl.constexpr,
                        DR: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_DR: tl.constexpr, MIN_SPLIT: tl.constexpr,
                        DOT_F32: tl.constexpr, DOT_PREC: tl.constexpr, STREAM_ONLY: tl.constexpr,
                        STAMPS: tl.constexpr, AHEAD2: tl.constexpr):
        zero = tl.program_id(0) * 0
        t_start = stamp(zero)
        b = tl.program_id(1).to(tl.int64)
        split = tl.program_id(2)
        pid = (tl.program_id(1) * tl.num_programs(2) + split) * tl.num_programs(0) + tl.program_id(0)
        seq = tl.load(SeqLens + b)
        kv = tl.maximum(seq - 1, 0)
        rpi = tl.load(ReqPoolIdx + b).to(tl.int64)
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        ti = r // NUM_HEADS
        head = r % NUM_HEADS
        rvalid = ti < 1
        qrow = b + ti
        dv = tl.arange(0, BLOCK_DV)
        dr = tl.arange(0, BLOCK_DR)
        qc, qr = load_query_rows(Q, qrow, head, rvalid, stride_qt, stride_qh, dv, dr, DV, DR, DOT_F32)
        span = split_len(seq, num_splits, BLOCK_N, MIN_SPLIT)
        lo = split * span
        hi = tl.minimum(lo + span, seq)
        table_row = ReqToToken + rpi * stride_rt
        slot_next = first_slots(table_row, lo, hi, BLOCK_N, True)
        if AHEAD2:  # the second block's slots in the same round trip as the first's
            nxt2 = lo + BLOCK_N + tl.arange(0, BLOCK_N)
            slot_next2 = tl.load(table_row + nxt2, mask=nxt2 < hi, other=0)
        else:
            slot_next2 = slot_next
        if STAMPS:
            t_ready = stamp(tl.sum(slot_next) + tl.sum(qc.to(tl.float32)).to(tl.int32))
        else:
            t_ready = t_start
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
        for start in range(lo, hi, BLOCK_N):
            pos = start + tl.arange(0, BLOCK_N)
            pmask = pos < hi
            if AHEAD2:  # slots two blocks ahead: the pipeline's first two tiles wait on one slot load
                slot = slot_next.to(tl.int64)
                slot_next = slot_next2
                nxt2 = pos + 2 * BLOCK_N
                slot_next2 = tl.load(table_row + nxt2, mask=nxt2 < hi, other=0)
            else:
                slot, slot_next = block_slots(table_row, pos, hi, slot_next, BLOCK_N, True)
            if STREAM_ONLY:  # the same loads; a column sum for the dots and the softmax
                ptr = KPool + slot[:, None] * stride_ks
                c = tl.load(ptr + dv[None, :], mask=pmask[:, None] & (dv[None, :] < DV), other=0.0)
                kr = tl.load(ptr + DV + dr[None, :], mask=pmask[:, None] & (dr[None, :] < DR), other=0.0)
                acc += tl.sum(c.to(tl.float32), 0)[None, :] + tl.sum(kr.to(tl.float32))
                l_i += 1.0
                m_i = tl.zeros([BLOCK_M], tl.float32)
            else:
                allowed = pmask[None, :] & (pos[None, :] <= kv + ti[:, None])
                m_i, l_i, acc = latent_block(qc, qr, m_i, l_i, acc, KPool, slot, stride_ks, pmask, allowed, dv, dr,
                                             scale_log2, DV, DR, Q.dtype.element_ty, DOT_F32, DOT_PREC)
        if STAMPS:
            t_loop = stamp(tl.sum(l_i).to(tl.int32))
        else:
            t_loop = t_start
        store_rows(Out, MidO, MidLse, qrow, head, split, dv, rvalid, m_i, l_i, acc, 0, 0, stride_mt, stride_mh,
                   stride_ms, stride_lt, stride_lh, DV, False)
        t_end = stamp(tl.sum(l_i).to(tl.int32))
        base = Times + pid * 5
        tl.store(base, smid(zero).to(tl.int64))
        tl.store(base + 1, t_start)
        tl.store(base + 2, t_ready)
        tl.store(base + 3, t_loop)
        tl.store(base + 4, t_end)

    return timeline_kernel


def setup(bs: int, ctx: int, device: torch.device, dims: tuple[int, int],
          heads: int) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(LatentSetup, q, seq_lens, out)``: ``bs`` requests of ``ctx`` cached latent rows each."""
    from mla_bench import LatentSetup

    gen = torch.Generator(device=device).manual_seed(bs * 7 + ctx)
    st = LatentSetup(bs, ctx, heads, dims[0], dims[1], 1, device, gen)
    q = torch.randn(bs, heads, sum(dims), device=device, generator=gen).to(torch.bfloat16)
    seq = torch.full((bs,), ctx, dtype=torch.int32, device=device)
    return st, q, seq, torch.empty(bs, heads, dims[0], dtype=torch.bfloat16, device=device)


def timed(fn: Any, launches: int, device: torch.device) -> float:
    """Microseconds per call over ``launches`` back-to-back calls (CUDA events; one call off CUDA)."""
    fn()
    if device.type != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(launches):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / launches


def summarize(times: torch.Tensor) -> dict[str, float]:
    """Per-program stamps [P, 5] (smid, start, ready, loop end, end; ns) -> microsecond stats."""
    t = times[:, 1:].double()
    t0 = t[:, 0].min()
    start, ready, loop, end = ((t[:, i] - t0) / 1e3 for i in range(4))

    def q(x: torch.Tensor, f: float) -> float:
        return round(float(torch.quantile(x, f)), 2)

    return {
        "programs": int(times.shape[0]), "sms": int(times[:, 0].unique().numel()),
        "span_us": round(float(end.max()), 2),
        "start_p50_us": q(start, 0.5), "start_max_us": q(start, 1.0),
        "ready_p50_us": q(ready - start, 0.5), "ready_max_us": q(ready - start, 1.0),
        "loop_p10_us": q(loop - ready, 0.1), "loop_p50_us": q(loop - ready, 0.5), "loop_max_us": q(loop - ready, 1.0),
        "store_p50_us": q(end - loop, 0.5),
        "end_p50_us": q(end, 0.5), "tail_us": round(float(end.max()) - q(end, 0.5), 2),
    }


def probe_shape(bs: int, ctx: int, splits: int, args: argparse.Namespace, device: torch.device,
                dims: tuple[int, int], heads: int, kernel: Any) -> list[dict[str, Any]]:
    from updraft.attention.triton_kernels import TileConfig
    from updraft.attention.triton_kernels.merge import merge_splits
    from updraft.attention.triton_kernels.mla_common import grid_rows, latent_consts
    from updraft.attention.triton_kernels.mla_decode import mla_decode_attention

    st, q, seq, out = setup(bs, ctx, device, dims, heads)
    pool, table, rows = st.pool.k_buffer[0], st.table, st.rows
    mid_o = torch.empty(bs, heads, splits, dims[0], dtype=torch.float32, device=device)
    mid_lse = torch.empty(bs, heads, splits, dtype=torch.float32, device=device)
    cfg = TileConfig(block_rows=16, block_n=64, min_split=64, num_warps=4, num_stages=3)
    if args.smoke:
        cfg = TileConfig(block_rows=16, block_n=16, min_split=16, num_warps=4, num_stages=3)
    dot_f32 = device.type != "cuda"
    consts = latent_consts(dims[0], sum(dims), q.dtype, dot_f32)
    scale = (128 + dims[1]) ** -0.5
    grid = (grid_rows(1, heads, cfg.block_rows), bs, splits)
    times = torch.zeros(grid[0] * bs * splits, 5, dtype=torch.int64, device=device)

    def production() -> None:
        mla_decode_attention(q, pool, out, table, rows, seq, None, mid_o, mid_lse, 1, splits, scale, cfg, dot_f32)

    def probe(stream_only: bool, stamps: bool, ahead2: bool = False) -> Any:
        def run() -> None:
            kernel[grid](q, pool, out, mid_o, mid_lse, table, rows, seq, times,
                         q.stride(0), q.stride(1), pool.stride(0), table.stride(0), mid_o.stride(0), mid_o.stride(1),
                         mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1), scale * 1.4426950408889634, splits,
                         NUM_HEADS=heads, BLOCK_M=cfg.block_rows, BLOCK_N=cfg.block_n, MIN_SPLIT=cfg.min_split,
                         STREAM_ONLY=stream_only, STAMPS=stamps, AHEAD2=ahead2, **consts, num_warps=cfg.num_warps,
                         num_stages=cfg.num_stages)
        return run

    production()
    want = out.float().clone()
    got = []
    for label, fn, check in (("production (kernel + merge)", production, False),
                             ("probe, stamps", probe(False, True), True),
                             ("probe, first and last stamp", probe(False, False), True),
                             ("probe, slots two blocks ahead", probe(False, False, True), True),
                             ("stream only, stamps", probe(True, True), False)):
        us = timed(fn, args.launches, device)
        row: dict[str, Any] = {"bs": bs, "context": ctx, "splits": splits, "variant": label, "event_us": round(us, 2)}
        if fn is not production:
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            row.update(summarize(times.cpu()))
            if check:
                merge_splits(mid_o, mid_lse, out, pdl=False)
                row["max_err_vs_production"] = float((out.float() - want).abs().max())
        got.append(row)
    return got


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        if not args.smoke:
            print("mla_timeline_probe: needs a CUDA GPU (--smoke for the interpreter)", file=sys.stderr)
            return 2
        os.environ["TRITON_INTERPRET"] = "1"
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dims, heads = ((32, 16), 4) if args.smoke else ((512, 64), 16)
    shapes = [(2, 70, 3)] if args.smoke else [tuple(int(v) for v in s.split("/")) for s in args.shapes.split(",")]
    kernel = kernels()
    rows = []
    for bs, ctx, splits in shapes:
        rows += probe_shape(bs, ctx, splits, args, device, dims, heads, kernel)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    cols = ["bs", "context", "splits", "variant", "event_us", "span_us", "start_max_us", "ready_p50_us", "loop_p50_us",
            "loop_max_us", "store_p50_us", "tail_us", "sms", "max_err_vs_production"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    if args.out is not None:
        from attention_bench import meta

        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta(device), "rows": rows}, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

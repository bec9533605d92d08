"""Probe for a persistent draft step: what a dependent phase boundary costs as a kernel boundary
(a PDL chain of launches in a CUDA graph, as every step runs today) against a grid-wide barrier
inside one launch (programs that stay resident and wait on a global counter between phases).

Why: a one-row draft step of the SmolLM2 head is eight launches (QKV, attention, merge, o_proj,
gate/up, down, LM head, argmax) at ~3-4 us each, ~29 us, against ~4 us of weight reads
(``benchmarks/results/2026-12-02-h200-dual-qkv-one-loop``: what is left is the launches' chain,
not their streams). One persistent launch running those phases with a grid barrier between them
pays only if a barrier costs well under a launch boundary. This measures both on the same work:
each phase, every program reads the whole previous phase's output (``G`` floats, one per
program: every program depends on every program, as a GEMV's input row does), streams its own
``chunk`` weights (bf16, from memory: the phases' weights are distinct and rotate over copies
larger than L2) and writes its one output. ``chain``: one launch a phase, PDL on sm_90+ (each
program prefetches its weights into L2 before its wait, as the GEMVs do); ``persistent``: one
launch of ``phases`` phases, the next phase's weights prefetched before each barrier.

Hazard (why production needs care): a grid barrier deadlocks unless every program of the launch
is resident at once, so ``G`` stays at most the SM count with one program per SM; a graph's
previous kernel may still hold SMs when the launch starts (its programs then wait longer, they
do not deadlock). The Triton interpreter runs programs one after another, so ``--smoke`` runs one
program (a barrier that never waits) and checks the arithmetic only.

``--gemv-chain``: the same question at the draft step's real bytes: its five one-row GEMVs
(SmolLM2 EAGLE-3 head: QKV, o_proj, gate/up, down, the 8,192-token LM head; ``DRAFT_STEP``) eight
steps over, as production ``gemv.linear`` launches (PDL, shipped configs) against one persistent
launch (rows split evenly over 32 / 66 / all SMs' programs, each prefetching its next phase's
rows into L2 before the barrier). What the persistent step could save, before attention, the
merge and the argmax are folded in.

Correctness: each variant's final vector against a float64 replay of the phases.

    python benchmarks/grid_barrier_probe.py --out results/grid_barrier_probe.json
    python benchmarks/grid_barrier_probe.py --gemv-chain --out results/grid_barrier_chain.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if not torch.cuda.is_available():  # the interpreter switch is read when a kernel is defined
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from updraft.ops.gemv_config import graph_seconds  # noqa: E402
from updraft.ops.triton_utils import pdl_enter, pdl_opts, prefetch_l2  # noqa: E402


@triton.jit
def _prefetch_chunk(W, pid, CHUNK: tl.constexpr, PREFETCH: tl.constexpr):
    if PREFETCH and CHUNK >= 64:  # one 128-byte line per 64 bf16 values (inline PTX: not in the interpreter)
        prefetch_l2(W + pid * CHUNK + tl.arange(0, CHUNK // 64) * 64)


@triton.jit
def _phase(X, W, Y, pid, G, BLOCK_G: tl.constexpr, CHUNK: tl.constexpr):
    """``Y[pid] = mean(X[:G]) * (1 + sum(W[pid, :CHUNK]) / CHUNK)``: every program reads every
    program's output of the phase before, and its own weights."""
    g = tl.arange(0, BLOCK_G)
    s = tl.sum(tl.load(X + g, mask=g < G, other=0.0), axis=0) / G
    if CHUNK > 0:
        w = tl.load(W + pid * CHUNK + tl.arange(0, CHUNK)).to(tl.float32)
        s = s * (1.0 + tl.sum(w, axis=0) / CHUNK)
    tl.store(Y + pid, s)


@triton.jit
def chain_kernel(X, W, Y, G, BLOCK_G: tl.constexpr, CHUNK: tl.constexpr, PREFETCH: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    _prefetch_chunk(W, pid, CHUNK, PREFETCH)
    pdl_enter(PDL)
    _phase(X, W, Y, pid, G, BLOCK_G, CHUNK)


@triton.jit
def _grid_barrier(Count, G):
    """Every program of the launch has arrived (each arrival releases its phase's stores; the
    wait acquires everyone's). Scalar atomics run once per program."""
    tl.debug_barrier()  # this program's threads are done with the phase
    tl.atomic_add(Count, 1, sem="release", scope="gpu")
    seen = tl.atomic_add(Count, 0, sem="acquire", scope="gpu")
    while seen < G:
        seen = tl.atomic_add(Count, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _reset_counters(Count, Done, G, PHASES):
    """The last program out zeroes the barrier counters for the next launch: it arrives at
    ``Done`` after every program has passed every barrier."""
    ticket = tl.atomic_add(Done, 1, sem="acq_rel", scope="gpu")
    if ticket == G - 1:
        c = tl.arange(0, 64)
        for p0 in range(0, PHASES, 64):
            tl.store(Count + p0 + c, tl.zeros([64], tl.int32), mask=p0 + c < PHASES)
        tl.atomic_xchg(Done, 0)


@triton.jit
def persistent_kernel(X0, Bufs, W, Count, Done, G, PHASES, w_phase_stride, BLOCK_G: tl.constexpr,
                      CHUNK: tl.constexpr, PREFETCH: tl.constexpr):
    """``PHASES`` phases as ``chain_kernel``'s launches run them: phase 0 reads ``X0``, phase
    ``p`` writes ``Bufs[p % 2]`` (``BLOCK_G`` floats each) and reads the other, its weights at
    ``W + p * w_phase_stride``; a barrier counter per phase boundary (``Count[p - 1]``), reset
    by ``_reset_counters``."""
    pid = tl.program_id(0)
    _prefetch_chunk(W, pid, CHUNK, PREFETCH)
    _phase(X0, W, Bufs, pid, G, BLOCK_G, CHUNK)
    for p in range(1, PHASES):
        _prefetch_chunk(W + p * w_phase_stride, pid, CHUNK, PREFETCH)
        _grid_barrier(Count + p - 1, G)
        _phase(Bufs + ((p - 1) % 2) * BLOCK_G, W + p * w_phase_stride, Bufs + (p % 2) * BLOCK_G, pid, G, BLOCK_G,
               CHUNK)
    _reset_counters(Count, Done, G, PHASES)


#: The one-row GEMVs of a SmolLM2 EAGLE-3 draft step, (N, K), in order: QKV (embedding | feature),
#: o_proj, gate/up, down, the 8,192-token draft LM head. Phase i reads the first K_i values of
#: phase i - 1's output (the attention and SiLU-mul left out: a GEMV chain of the step's bytes).
DRAFT_STEP = ((960, 1152), (576, 576), (3072, 576), (576, 1536), (8192, 576))


@triton.jit
def _gemv_rows(X, W, Y, pid, G, N, K, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """This program's rows of ``Y[:N] = round(W[N, K] @ X[:K])`` (rows split evenly over ``G``
    programs; float32 sums, bf16 out)."""
    per = tl.cdiv(N, G)
    for r0 in range(pid * per, tl.minimum(pid * per + per, N), BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        rmask = (r < N) & (r < pid * per + per)
        acc = tl.zeros([BLOCK_R], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(X + k, mask=k < K, other=0.0).to(tl.float32)
            w = tl.load(W + r[:, None].to(tl.int64) * K + k[None, :], mask=rmask[:, None] & (k < K)[None, :],
                        other=0.0)
            acc += tl.sum(w.to(tl.float32) * x[None, :], axis=1)
        tl.store(Y + r, acc.to(Y.dtype.element_ty), mask=rmask)


@triton.jit
def _prefetch_rows(W, pid, G, N, K, PREFETCH: tl.constexpr):
    if PREFETCH:
        per = tl.cdiv(N, G)
        lines = tl.arange(0, 32) * 64  # 64 bf16 values a 128-byte line, K <= 2048
        for r in range(pid * per, tl.minimum(pid * per + per, N)):
            prefetch_l2(W + r.to(tl.int64) * K + tl.where(lines < K, lines, 0))


@triton.jit
def gemv_chain_kernel(X0, Bufs, W, Meta, Count, Done, G, PHASES, NSHAPES, BUF, copy_stride, COPIES,
                      BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, PREFETCH: tl.constexpr):
    """``PHASES`` GEMVs of the shapes in ``Meta`` ([NSHAPES, 3] int64: N, K, weight offset),
    cycling, phase ``p`` on weight copy ``(p // NSHAPES) % COPIES``: phase 0 reads ``X0``, phase
    ``p`` writes ``Bufs[p % 2]`` (``BUF`` values each) and reads the other; a grid barrier between
    phases (``_reset_counters``)."""
    pid = tl.program_id(0)
    n = tl.load(Meta)
    k = tl.load(Meta + 1)
    _prefetch_rows(W + tl.load(Meta + 2), pid, G, n, k, PREFETCH)
    _gemv_rows(X0, W + tl.load(Meta + 2), Bufs, pid, G, n, k, BLOCK_R, BLOCK_K)
    for p in range(1, PHASES):
        i = p % NSHAPES
        n = tl.load(Meta + 3 * i)
        k = tl.load(Meta + 3 * i + 1)
        wp = W + tl.load(Meta + 3 * i + 2) + ((p // NSHAPES) % COPIES).to(tl.int64) * copy_stride
        _prefetch_rows(wp, pid, G, n, k, PREFETCH)
        _grid_barrier(Count + p - 1, G)
        _gemv_rows(Bufs + ((p - 1) % 2) * BUF, wp, Bufs + (p % 2) * BUF, pid, G, n, k, BLOCK_R, BLOCK_K)
    _reset_counters(Count, Done, G, PHASES)


def run_gemv_chain(dev: torch.device, shapes: tuple[tuple[int, int], ...], steps: int, copies: int,
                   programs: list[int]) -> list[dict[str, Any]]:
    """The draft step's GEMVs ``steps`` times over: production ``gemv.linear`` launches (PDL, the
    shipped configs) against one persistent launch at each program count; float64 checks."""
    from updraft.ops import gemv

    gen = torch.Generator(device="cpu").manual_seed(5)
    offs, off = [], 0
    for n, k in shapes:
        offs.append(off)
        off += n * k
    w_flat = torch.empty(copies, off, dtype=torch.bfloat16)
    for c in range(copies):
        for (n, k), o in zip(shapes, offs, strict=True):
            w_flat[c, o : o + n * k] = (torch.randn(n * k, generator=gen) / k**0.5).to(torch.bfloat16)
    w_flat = w_flat.to(dev)
    ws = [[w_flat[c, o : o + n * k].view(n, k) for (n, k), o in zip(shapes, offs, strict=True)] for c in range(copies)]
    meta = torch.tensor([[n, k, o] for (n, k), o in zip(shapes, offs, strict=True)], dtype=torch.int64, device=dev)
    buf = max(n for n, _ in shapes)
    x0 = (torch.randn(1, shapes[0][1], generator=gen)).to(torch.bfloat16).to(dev)
    phases = steps * len(shapes)
    # float64 replay, rounding each phase's output to bf16 as both variants do
    x = x0[0].double().cpu()
    for p in range(phases):
        (n, k), w = shapes[p % len(shapes)], ws[(p // len(shapes)) % copies][p % len(shapes)]
        x = (w.double().cpu() @ x[:k]).to(torch.bfloat16).double()
    ref = x
    state = {"copy": 0}
    holder: dict[str, torch.Tensor] = {}

    def chain() -> None:
        cur = x0
        for p in range(phases):
            k, c = shapes[p % len(shapes)][1], (state["copy"] * steps + p // len(shapes)) % copies
            cur = gemv.linear(cur[:, :k], ws[c][p % len(shapes)])[0]
        holder["chain"] = cur
        state["copy"] += 1

    rows: list[dict[str, Any]] = []
    row: dict[str, Any] = {"variant": "chain (gemv.linear, PDL)", "phases": phases}
    state["copy"] = 0
    chain()
    row["rel_err"] = float((holder["chain"][0].double().cpu() - ref).abs().max() / ref.abs().max())
    if dev.type == "cuda":
        row["us_per_step"] = graph_seconds(chain, 4) * 1e6 / steps
    rows.append(row)
    bufs = torch.zeros(2, buf, dtype=torch.bfloat16, device=dev)
    count = torch.zeros(phases, dtype=torch.int32, device=dev)
    done = torch.zeros(1, dtype=torch.int32, device=dev)
    # rows, K chunk, warps (sm_90, triton 3.9: 145 and 119 registers, no spills; 32 x 256 spilled)
    tiles = [(8, 1024, 4), (16, 512, 4)] if dev.type == "cuda" else [(8, 64, 4)]
    for g, (br, bk, warps) in ((g, t) for g in programs for t in tiles):
        def persistent(g: int = g, br: int = br, bk: int = bk, warps: int = warps) -> None:
            gemv_chain_kernel[(g,)](x0, bufs, w_flat, meta, count, done, g, phases, len(shapes), buf,
                                    w_flat.stride(0), copies, BLOCK_R=br, BLOCK_K=bk, PREFETCH=dev.type == "cuda",
                                    num_warps=warps)

        persistent()
        got = bufs[(phases - 1) % 2, : shapes[(phases - 1) % len(shapes)][0]].double().cpu()
        row = {"variant": f"persistent, {g} programs, tile {br}x{bk}, {warps} warps", "phases": phases,
               "rel_err": float((got - ref).abs().max() / ref.abs().max()),
               "counters_reset": bool((count == 0).all() and (done == 0).all())}
        if dev.type == "cuda":
            row["us_per_step"] = graph_seconds(persistent, 4) * 1e6 / steps
        rows.append(row)
    return rows


def reference(x0: torch.Tensor, ws: list[torch.Tensor], g: int, chunk: int) -> torch.Tensor:
    x = x0.double()[:g]
    for w in ws:
        s = x.mean()
        x = s * (1.0 + w.double().view(-1)[: g * chunk].view(g, chunk).sum(1) / chunk) if chunk else s.expand(g)
    return x


def run_case(dev: torch.device, g: int, chunk: int, phases: int, copies: int) -> dict[str, Any]:
    block_g = triton.next_power_of_2(g)
    gen = torch.Generator(device="cpu").manual_seed(g * 7919 + chunk)
    # one weight block per phase, `copies` blocks in rotation so each phase reads memory, not L2
    w_all = (1 + torch.rand(copies * phases, max(g * chunk, 1), generator=gen) * 0.01).to(torch.bfloat16).to(dev)
    x0 = torch.rand(block_g, generator=gen).to(dev)
    bufs = torch.zeros(2, block_g, device=dev)
    chain_bufs = [torch.zeros(block_g, device=dev) for _ in range(2)]
    count = torch.zeros(phases, dtype=torch.int32, device=dev)
    done = torch.zeros(1, dtype=torch.int32, device=dev)
    opts = pdl_opts(dev, "gemv")
    gpu = dev.type == "cuda"
    state = {"copy": 0}

    def chain() -> None:
        base = (state["copy"] % copies) * phases
        for p in range(phases):
            src = x0 if p == 0 else chain_bufs[(p - 1) % 2]
            chain_kernel[(g,)](src, w_all[base + p], chain_bufs[p % 2], g, BLOCK_G=block_g, CHUNK=chunk,
                               PREFETCH=gpu, num_warps=4, **opts)
        state["copy"] += 1

    def persistent() -> None:
        base = (state["copy"] % copies) * phases
        persistent_kernel[(g,)](x0, bufs, w_all[base], count, done, g, phases, w_all.stride(0), BLOCK_G=block_g,
                                CHUNK=chunk, PREFETCH=gpu, num_warps=4)
        state["copy"] += 1

    ref = reference(x0.cpu(), [w_all[p].cpu() for p in range(phases)], g, chunk)
    row: dict[str, Any] = {"programs": g, "chunk": chunk, "phases": phases}
    for name, fn, out in (("chain", chain, lambda: chain_bufs[(phases - 1) % 2]),
                          ("persistent", persistent, lambda: bufs[(phases - 1) % 2])):
        state["copy"] = 0
        fn()
        got = out()[:g].double().cpu()
        row[f"{name}_rel_err"] = float((got - ref).abs().max() / ref.abs().max())
        if dev.type == "cuda":
            row[f"{name}_us_per_phase"] = graph_seconds(fn, 4) * 1e6 / phases
    row["counters_reset"] = bool((count == 0).all() and (done == 0).all())
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help="one program, tiny chunks, under the Triton interpreter (CPU)")
    p.add_argument("--phases", type=int, default=64)
    p.add_argument("--gemv-chain", action="store_true",
                   help="the draft step's five GEMVs (SmolLM2 head) as gemv.linear launches against one persistent launch")
    args = p.parse_args(argv)
    if not torch.cuda.is_available() and not args.smoke:
        print("grid_barrier_probe: needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        cases = [(g, c) for g in (8, 32, 66, sms) for c in (0, 1024, 8192)]
        phases, copies = args.phases, 8
    else:
        cases, phases, copies = [(1, 0), (1, 128)], 3, 1
    rows = []
    if args.gemv_chain:
        sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 1
        shapes = DRAFT_STEP if dev.type == "cuda" else ((24, 40), (16, 24), (40, 16))
        steps, copies = (8, 8) if dev.type == "cuda" else (2, 2)
        programs = [32, 66, sms] if dev.type == "cuda" else [1]
        chain_rows = run_gemv_chain(dev, shapes, steps, copies, programs)
        for r in chain_rows:
            print(f"{r['variant']:48s} {r.get('us_per_step', float('nan')):7.2f} us a draft step's GEMVs; rel err "
                  f"{r['rel_err']:.1e}", flush=True)
        cases = []
        rows.extend(chain_rows)
    for g, chunk in cases:
        row = run_case(dev, g, chunk, phases, copies)
        rows.append(row)
        print(f"G {g:3d} chunk {chunk:5d}: chain {row.get('chain_us_per_phase', float('nan')):6.2f} us, persistent "
              f"{row.get('persistent_us_per_phase', float('nan')):6.2f} us a phase; rel err {row['chain_rel_err']:.1e} / "
              f"{row['persistent_rel_err']:.1e}; counters reset {row['counters_reset']}", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
                "triton": triton.__version__}
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

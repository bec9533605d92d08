"""Does a grid barrier cost less than a kernel boundary? (issue 12's persistent-draft-step lever)

    python benchmarks/results/2026-11-27-h100-grid-barrier/barrier_probe.py --out DIR

A chain of P dependent one-row GEMVs at SmolLM2's width (576 x 576 bf16 weights, one per phase;
phase p reads the row phase p - 1 wrote), the shape of a draft step's launches, timed three ways
inside a CUDA graph (R chains back to back, CUDA events, median of 5 replays), us per phase:

* ``launches``: one launch per phase, each waiting on the one before (PDL off);
* ``launches_pdl``: the same with programmatic dependent launch (how updraft launches today);
* ``persistent``: one launch for the whole chain; each program does its column tile of a phase,
  then a grid barrier (a release ``atomic_add`` on a counter, an acquire spin until every program
  arrived), rows read through L2 (``.cg``): the launch-free chain a persistent draft step would be.

Each variant's output is checked against float64 (a barrier that let a program read a row before
it was complete would show as a wrong result). Programs: 144 (4 rows each), co-resident on 132 SMs.
The persistent kernel needs every program resident at once, which holds here (tiny programs) but
is not something the compiled kernel can check: this is a measurement, not a shipped kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

N = K = 576
KP = 1024  # K padded to a power of two
BLOCK_N = 4


@triton.jit
def _phase(W, X, Y, p, pid, N: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BLOCK_N: tl.constexpr,
           CG: tl.constexpr):
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, KP)
    km = k < K
    w = tl.load(W + p * N * K + n[:, None] * K + k[None, :], mask=km[None, :], other=0.0)
    if CG:
        x = tl.load(X + k, mask=km, other=0.0, cache_modifier=".cg")
    else:
        x = tl.load(X + k, mask=km, other=0.0)
    y = tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
    tl.store(Y + n, y.to(tl.bfloat16))


@triton.jit
def step_kernel(W, X, Y, p, N: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BLOCK_N: tl.constexpr,
                PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    _phase(W, X, Y, p, tl.program_id(0), N, K, KP, BLOCK_N, False)


@triton.jit
def persistent_kernel(W, Buf, Bar, P, N: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    for p in range(P):
        _phase(W, Buf + (p % 2) * N, Buf + ((p + 1) % 2) * N, p, pid, N, K, KP, BLOCK_N, True)
        tl.debug_barrier()  # every thread's stores issued before the release
        tl.atomic_add(Bar, 1, sem="release", scope="gpu")
        target = (p + 1) * g
        seen = tl.atomic_add(Bar, 0, sem="acquire", scope="gpu")
        while seen < target:
            seen = tl.atomic_add(Bar, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()
    # the last program out resets both counters for the next launch (every program has passed
    # every barrier once it increments the exit counter)
    t = tl.atomic_add(Bar + 1, 1, sem="acq_rel", scope="gpu")
    if t == g - 1:
        tl.atomic_xchg(Bar, 0, sem="release", scope="gpu")
        tl.atomic_xchg(Bar + 1, 0, sem="release", scope="gpu")


def reference(w: torch.Tensor, x0: torch.Tensor, phases: int) -> torch.Tensor:
    x = x0.double()
    for p in range(phases):
        x = (w[p].double() @ x).to(torch.bfloat16).double()
    return x


def timed(fn, reps: int) -> float:
    """us per call of ``fn``: ``reps`` calls captured in one graph, median of 5 replays."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000 / reps)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--phases", default="1,2,4,8,16")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = torch.device("cuda")
    grid = (N // BLOCK_N,)
    rows = []
    for phases in (int(v) for v in args.phases.split(",")):
        w = (torch.randn(phases, N, K, device=dev) * 0.04).to(torch.bfloat16)
        x0 = torch.randn(N, device=dev).to(torch.bfloat16)
        want = reference(w, x0, phases)
        bufs = torch.empty(phases + 1, N, device=dev, dtype=torch.bfloat16)
        buf2 = torch.empty(2, N, device=dev, dtype=torch.bfloat16)
        bar = torch.zeros(2, dtype=torch.int32, device=dev)

        def chain(pdl: bool) -> None:
            bufs[0].copy_(x0)
            for p in range(phases):
                kw = {"launch_pdl": True} if pdl else {}
                step_kernel[grid](w, bufs[p], bufs[p + 1], p, N, K, KP, BLOCK_N, PDL=pdl, **kw)

        def persistent() -> None:
            buf2[0].copy_(x0)
            persistent_kernel[grid](w, buf2, bar, phases, N, K, KP, BLOCK_N)

        row = {"phases": phases}
        for name, fn, res in (("launches", lambda: chain(False), lambda: bufs[phases]),
                              ("launches_pdl", lambda: chain(True), lambda: bufs[phases]),
                              ("persistent", persistent, lambda: buf2[phases % 2])):
            us = timed(fn, args.reps)
            fn()
            torch.cuda.synchronize()
            err = ((res().double() - want).abs().max() / want.abs().max()).item()
            row[name + "_us"] = us
            row[name + "_err"] = err
            assert err < 2e-2, (name, phases, err)
            assert int(bar.sum()) == 0, "barrier counters not reset"
        rows.append(row)
        print(f"P={phases:2d}  launches {row['launches_us']:7.2f} us  pdl {row['launches_pdl_us']:7.2f} us  "
              f"persistent {row['persistent_us']:7.2f} us   (per chain, incl. one copy)", flush=True)
    # per-phase slopes between the largest and smallest chains
    lo, hi = rows[0], rows[-1]
    slope = {k: (hi[k + "_us"] - lo[k + "_us"]) / (hi["phases"] - lo["phases"]) for k in ("launches", "launches_pdl", "persistent")}
    print("us per extra phase: " + ", ".join(f"{k} {v:.2f}" for k, v in slope.items()))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "barrier_probe.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(), rows=rows,
                                                                 us_per_phase=slope), indent=1))


if __name__ == "__main__":
    main()

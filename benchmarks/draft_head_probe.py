"""Probe for issue 12's bs-1 cycle (1.28-1.31 plain steps, goal 1.25): the draft head's launches
that still run on cuBLAS.

A greedy S = 5 cycle reads the EAGLE-3 head's draft LM head (8,192 x 576 for SmolLM2) five times:
each time cuBLAS writes the bf16 logits (4.0-5.6 us on the H200 with PDL off) and
``argmax_rows`` picks the draft (2.0-2.2 us), two launches of which cuBLAS's cannot start
under PDL nor prefetch its weights. The first draft of a cycle adds an RMSNorm launch in front.
The draft extend's ``fc`` (6 rows x 1,728 -> 576) also runs on cuBLAS (5.3 us for 2 MB).

This times, each as a CUDA graph of ``reps`` back-to-back pairs (a GEMV standing for the
kernel before it in the chain, then the variant), minus the GEMV alone:

* ``cublas + argmax``: ``F.linear`` then ``argmax_rows`` with the draft -> target map (today);
* ``gemv argmax``: ``gemv.linear(argmax=True)`` (the small-M kernel's ticket epilogue; no map);
* ``probe nN kK wW [pf]``: this script's kernel: N weight rows a program, the whole row
  prefetched into L2 before the PDL wait (``pf``) or not, the argmax partials, the last program
  (a ticket) reducing them and writing the mapped target id into a strided column;
* with ``--norm`` rows the first draft's form (RMSNorm in the prologue) against
  ``rmsnorm + cublas + argmax``;
* ``fc``: ``F.linear`` against ``gemv.linear`` at 6 rows x 1,728 -> 576.

``warm``: one weight copy (the chain's steps 2-4 find the head in L2); ``cold``: copies rotated
past L2. Every variant's pick is checked against torch's argmax of float64 logits (ties aside).
``--smoke``: tiny shapes under the Triton interpreter (CPU).

    python benchmarks/draft_head_probe.py --out results/draft_head_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if not torch.cuda.is_available():  # the interpreter switch is read when a kernel is defined
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from attention_bench import meta  # noqa: E402

from updraft.ops import gemv, rmsnorm  # noqa: E402
from updraft.ops.gemv_config import graph_seconds  # noqa: E402
from updraft.ops.gemv_kernels import _argmax_partial, _argmax_reduce, _prefetch_rows  # noqa: E402
from updraft.ops.triton_utils import pdl_enter, pdl_opts  # noqa: E402
from updraft.spec.sampling_kernels import argmax_rows  # noqa: E402


@triton.jit
def probe_kernel(X, NW, W, PMax, PIdx, Sem, Table, Out, M, N, K, stride_x, stride_w, stride_out, eps,
                 BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr,
                 NORM: tl.constexpr, PREFETCH: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    if PREFETCH:  # the whole rows: K is short (576), the stream starts during the kernel before
        _prefetch_rows(W, n.to(tl.int64), nmask, stride_w, K, 64)
    pdl_enter(PDL)
    m = tl.arange(0, BLOCK_M)
    mmask = m < M
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    sumsq = tl.zeros([BLOCK_M], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        kmask = k < K
        w = tl.load(W + n.to(tl.int64)[:, None] * stride_w + k[None, :], mask=nmask[:, None] & kmask[None, :],
                    other=0.0).to(tl.float32)
        a = tl.load(X + m[:, None] * stride_x + k[None, :], mask=mmask[:, None] & kmask[None, :],
                    other=0.0).to(tl.float32)
        if NORM:
            sumsq += tl.sum(a * a, axis=1)
            a = a * tl.load(NW + k, mask=kmask, other=0.0).to(tl.float32)[None, :]
        acc += tl.sum(w[:, None, :] * a[None, :, :], axis=2)
    if NORM:
        acc = acc * tl.rsqrt(sumsq / K + eps)[None, :]
    nprog = tl.num_programs(0)
    # the logits' rounding, as the bf16 LM head's; then the production GEMV's argmax epilogue
    _argmax_partial(acc.to(X.dtype.element_ty), n, nmask, m, mmask, PMax, PIdx, pid, nprog, N)
    tl.debug_barrier()
    ticket = tl.atomic_add(Sem, 1, sem="acq_rel")
    if ticket == nprog - 1:
        bi = _argmax_reduce(PMax, PIdx, m, mmask, nprog, N, BLOCK_M, BLOCK_P)
        tid = bi.to(tl.int64) + tl.load(Table + bi, mask=mmask, other=0)  # EAGLE-3's d2t: target = i + d2t[i]
        tl.store(Out + m * stride_out, tid, mask=mmask)
        tl.atomic_xchg(Sem, 0)


def after_gemv(pred_x: torch.Tensor, pred_w: torch.Tensor, reps: int) -> Callable[[Callable[[int], object]], float]:
    """``timed(fn)``: us a pair, ``reps`` pairs in one CUDA graph of a GEMV standing for the kernel
    before the variant (``pred_x`` x ``pred_w``) then ``fn(i)`` (``i`` counting the calls)."""

    def timed(fn: Callable[[int], object]) -> float:
        calls = [0]

        def rep() -> None:
            gemv.linear(pred_x, pred_w)
            fn(calls[0])
            calls[0] += 1

        return graph_seconds(rep, reps) * 1e6

    return timed


def probe_variants(x: torch.Tensor, nw: torch.Tensor, heads: list[torch.Tensor], d2t: torch.Tensor,
                   dst: torch.Tensor, sem: torch.Tensor, tiles: list[tuple[int, int, int]],
                   norm: bool) -> dict[str, Callable[[int], object]]:
    """The probe kernel at each tile, with and without its prefetch: call ``i`` reads weight copy
    ``i % len(heads)``."""
    gpu = x.is_cuda
    m_rows, hid = x.shape
    vocab = heads[0].shape[0]
    bm = triton.next_power_of_2(m_rows)
    out: dict[str, Callable[[int], object]] = {}
    for bn, bk, warps in tiles:
        nprog = triton.cdiv(vocab, bn)
        pmax = torch.empty(m_rows, nprog, dtype=torch.float32, device=x.device)
        pidx = torch.empty(m_rows, nprog, dtype=torch.int32, device=x.device)
        for pf in (True, False):
            def probe(i: int, bn: int = bn, bk: int = bk, warps: int = warps, pf: bool = pf,
                      pmax: torch.Tensor = pmax, pidx: torch.Tensor = pidx, nprog: int = nprog) -> None:
                w = heads[i % len(heads)]
                probe_kernel[(nprog,)](x, nw, w, pmax, pidx, sem, d2t, dst, m_rows, vocab, hid, x.stride(0),
                                       w.stride(0), dst.stride(0), 1e-5, BLOCK_N=bn, BLOCK_M=bm, BLOCK_K=bk,
                                       BLOCK_P=min(1024, triton.next_power_of_2(nprog)), NORM=norm,
                                       PREFETCH=pf and gpu, num_warps=warps, **pdl_opts(x.device, "gemv"))

            out[f"probe n{bn} k{bk} w{warps}{' pf' if pf else ''}{' norm' if norm else ''}"] = probe
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help="tiny shapes under the Triton interpreter (CPU)")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available()
    if not gpu and not args.smoke:
        print("draft_head_probe: needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2
    dev = torch.device("cuda" if gpu else "cpu")
    dt = torch.bfloat16
    vocab, hid, inter, fc_in = (8192, 576, 1536, 1728) if gpu else (96, 40, 48, 72)
    reps = 32 if gpu else 1
    tiles = ([(8, 64, 2), (8, 128, 4), (16, 64, 4), (16, 128, 4), (32, 64, 4), (32, 64, 8), (16, 256, 8)]
             if gpu else [(8, 16, 2)])
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(dt).to(dev)

    copies = 8 if gpu else 2  # 8 x 9.4 MB: past the H200's 50 MB L2
    heads = [rnd(vocab, hid, scale=hid ** -0.5) for _ in range(copies)]
    pred_w = rnd(hid, inter, scale=inter ** -0.5)  # the down projection before the LM head
    pred_x = rnd(1, inter)
    nw = (1 + 0.1 * torch.randn(hid, generator=gen)).to(dt).to(dev)
    d2t = torch.randint(0, 40000, (vocab,), generator=gen).to(dev)
    sem = torch.zeros(8, dtype=torch.int32, device=dev)
    rows: list[dict[str, Any]] = []

    timed = after_gemv(pred_x, pred_w, reps)

    def record(row: dict[str, Any], fn: Callable[[int], object], check: str) -> None:
        """Time ``fn`` warm (weight copy 0 every call) and cold (copies rotated), then keep and
        print the row."""
        if gpu:
            row["warm_us"] = timed(lambda i: fn(0)) - base
            row["cold_us"] = timed(fn) - base
        rows.append(row)
        print(f"rows {row['rows']} {row['variant']:36s} warm {row.get('warm_us', float('nan')):6.2f}  "
              f"cold {row.get('cold_us', float('nan')):6.2f} us  {check}", flush=True)

    base = graph_seconds(lambda: gemv.linear(pred_x, pred_w), reps) * 1e6 if gpu else 0.0
    for m_rows in (1, 8) if gpu else (1, 3):
        x = rnd(m_rows, hid)
        ids = torch.zeros(m_rows, 6, dtype=torch.long, device=dev)
        dst = ids[:, 1]
        for norm in (False, True):
            xin = rmsnorm(x, nw, 1e-5) if norm else x
            ref = (xin.double() @ heads[0].double().T).argmax(-1)
            want = ref + d2t[ref]
            variants: dict[str, Callable[[int], object]] = {}

            def chain(i: int, norm: bool = norm) -> None:
                a = rmsnorm(x, nw, 1e-5) if norm else x
                argmax_rows(F.linear(a, heads[i % copies]), (d2t, True), out=dst)

            variants["rmsnorm + cublas + argmax" if norm else "cublas + argmax"] = chain
            if not norm:
                variants["gemv argmax (no map)"] = lambda i: gemv.linear(x, heads[i % copies], argmax=True)
            variants.update(probe_variants(x, nw, heads, d2t, dst, sem, tiles, norm))
            for name, fn in variants.items():
                dst.zero_()
                fn(0)
                if name.startswith("gemv"):
                    got_ok = True  # its own tests check it; no map here
                else:
                    got_ok = bool((dst == want).all())
                record({"rows": m_rows, "variant": name, "norm": norm, "pick_ok": got_ok}, fn, f"pick ok {got_ok}")
    # the draft extend's fc: 6 rows of three features -> the head's width
    fcw = [rnd(hid, fc_in, scale=fc_in ** -0.5) for _ in range(copies)]
    feats = rnd(6, fc_in)
    ref = feats.double() @ fcw[0].double().T
    for name, fn in {"fc cublas": lambda i: F.linear(feats, fcw[i % copies]),
                     "fc gemv": lambda i: gemv.linear(feats, fcw[i % copies])[0]}.items():
        got = fn(0)
        err = float((got.double() - ref).abs().max() / ref.abs().max())
        record({"rows": 6, "variant": name, "rel_err": err}, fn, f"rel err {err:.1e}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta(dev), "predecessor_us": base, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Probe for issue 12's bs-1 cycle: the draft LM head and its argmax as a PDL launch that holds its
weights in registers before the wait and publishes each row's pick with one packed atomic max.

Today each draft step ends in cuBLAS's LM head (8,192 x 576 for SmolLM2's head; 4-6 us in the
cycle's profile, no PDL: it starts only once the down projection before it has ended) and
``argmax_rows`` (2.1 us). The one-launch heads timed on 2026-11-27 and 2026-12-02 lost by 3-5 us:
they read their weights after the PDL wait and reduced the programs' maxima through a ticket (the
last program reading every partial). This kernel differs in both:

* one wave of programs (``BLOCK_N`` weight rows each); every program loads its rows into
  registers BEFORE ``gdc_wait`` (weights are never written, so the PDL contract allows it): the
  loads run during the down projection's tail;
* after the wait it reads the input rows, and each program ends with ONE ``atomic_max`` a row on
  an int64 slot holding ``(ordered float bits << 32) | (2^31 - 1 - index)``: the largest logit,
  the smallest index among equals (torch's argmax), no ticket and no partials.

A reader (``decode``: one tiny launch here, standing for ``argmax_rows``'s place; or the next
kernel's prologue) takes the index back, maps it to a target id and resets the slot.

Timed as ``draft_head_probe.py`` does: a CUDA graph of ``reps`` pairs (a GEMV standing for the
down projection, then the variant) minus that GEMV alone; warm (one weight copy, as the chain's
steps 2-5 find the head in L2) and cold (copies rotated past L2). Picks checked against float64.

    python benchmarks/head_pick_probe.py --out results/head_pick_probe.json
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

from updraft.ops import gemv  # noqa: E402
from updraft.ops.gemv_config import graph_seconds  # noqa: E402
from updraft.ops.triton_utils import pdl_enter, pdl_opts  # noqa: E402
from updraft.spec.head_pick import HeadPick, HeadRows  # noqa: E402
from updraft.spec.sampling_kernels import argmax_rows  # noqa: E402

SLOT_EMPTY = -(2 ** 63)


@triton.jit
def _ordered(x):
    """float32 -> int32 with the floats' order (signed compare)."""
    b = x.to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, b ^ 0x7FFFFFFF)


@triton.jit
def head_pick_kernel(X, W, Slot, M, N, stride_x, stride_w, K1: tl.constexpr, K2: tl.constexpr,
                     BLOCK_K2: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                     PRELOAD: tl.constexpr, ROUND: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = n < N
    k1 = tl.arange(0, K1)
    k2 = K1 + tl.arange(0, BLOCK_K2)
    k2m = k2 < K1 + K2
    wrow = W + n.to(tl.int64)[:, None] * stride_w
    if PRELOAD:
        w1 = tl.load(wrow + k1[None, :], mask=nmask[:, None], other=0.0)
        w2 = tl.load(wrow + k2[None, :], mask=nmask[:, None] & k2m[None, :], other=0.0)
    pdl_enter(PDL)
    if not PRELOAD:
        w1 = tl.load(wrow + k1[None, :], mask=nmask[:, None], other=0.0)
        w2 = tl.load(wrow + k2[None, :], mask=nmask[:, None] & k2m[None, :], other=0.0)
    low = (0x7FFFFFFF - n).to(tl.int64)
    for m in tl.static_range(BLOCK_M):
        if m < M:
            a1 = tl.load(X + m * stride_x + k1).to(tl.float32)
            a2 = tl.load(X + m * stride_x + k2, mask=k2m, other=0.0).to(tl.float32)
            acc = tl.sum(w1.to(tl.float32) * a1[None, :], axis=1) + tl.sum(w2.to(tl.float32) * a2[None, :], axis=1)
            if ROUND:  # the bf16 logits' rounding, as the LM head's output
                acc = acc.to(X.dtype.element_ty).to(tl.float32)
            key = (_ordered(acc).to(tl.int64) << 32) | low
            key = tl.where(nmask, key, -9223372036854775807 - 1)
            tl.atomic_max(Slot + m, tl.max(key, axis=0), sem="relaxed")


@triton.jit
def decode_kernel(Slot, Table, Out, stride_out, M, BLOCK_M: tl.constexpr, PDL: tl.constexpr):
    pdl_enter(PDL)
    m = tl.arange(0, BLOCK_M)
    mm = m < M
    s = tl.load(Slot + m, mask=mm, other=0)
    idx = tl.where(mm, 0x7FFFFFFF - (s & 0xFFFFFFFF), 0)
    tid = idx + tl.load(Table + idx, mask=mm, other=0)
    tl.store(Out + m * stride_out, tid, mask=mm)
    tl.store(Slot + m, tl.full([BLOCK_M], -9223372036854775807 - 1, tl.int64), mask=mm)


def launch_pick(x: torch.Tensor, w: torch.Tensor, slot: torch.Tensor, bn: int, warps: int, preload: bool) -> None:
    m, k = x.shape
    k1 = 1 << (k.bit_length() - 1)
    k2 = k - k1
    head_pick_kernel[(triton.cdiv(w.shape[0], bn),)](
        x, w, slot, m, w.shape[0], x.stride(0), w.stride(0), K1=k1, K2=k2, BLOCK_K2=max(16, triton.next_power_of_2(max(k2, 1))),
        BLOCK_N=bn, BLOCK_M=triton.next_power_of_2(m), PRELOAD=preload, ROUND=x.dtype == torch.bfloat16,
        num_warps=warps, **pdl_opts(x.device, "gemv"))


def launch_decode(slot: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> None:
    m = out.shape[0]
    decode_kernel[(1,)](slot, table, out, out.stride(0), m, BLOCK_M=max(2, triton.next_power_of_2(m)), num_warps=1,
                        **pdl_opts(slot.device, "sampling"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help="tiny shapes under the Triton interpreter (CPU)")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available()
    if not gpu and not args.smoke:
        print("head_pick_probe: needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2
    dev = torch.device("cuda" if gpu else "cpu")
    dt = torch.bfloat16 if gpu else torch.float32
    vocab, hid, inter = (8192, 576, 1536) if gpu else (96, 40, 48)
    reps = 32 if gpu else 1
    tiles = [(32, 4), (32, 8), (64, 4), (64, 8), (16, 4), (128, 8)] if gpu else [(16, 2)]
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(dt).to(dev)

    copies = 8 if gpu else 2
    heads = [rnd(vocab, hid, scale=hid ** -0.5) for _ in range(copies)]
    pred_w = rnd(hid, inter, scale=inter ** -0.5)
    pred_x = rnd(1, inter)
    d2t = torch.randint(0, 40000, (vocab,), generator=gen).to(dev)
    rows: list[dict[str, Any]] = []

    def timed(fn: Callable[[int], object]) -> float:
        calls = [0]

        def rep() -> None:
            gemv.linear(pred_x, pred_w)
            fn(calls[0])
            calls[0] += 1

        return graph_seconds(rep, reps) * 1e6

    base = graph_seconds(lambda: gemv.linear(pred_x, pred_w), reps) * 1e6 if gpu else 0.0
    for m_rows in (1, 8) if gpu else (1, 3):
        x = rnd(m_rows, hid)
        ids = torch.zeros(m_rows, 6, dtype=torch.long, device=dev)
        dst = ids[:, 1]
        logits64 = x.double() @ heads[0].double().T
        ref = logits64.argmax(-1)
        want = ref + d2t[ref]
        slot = torch.full((m_rows,), SLOT_EMPTY, dtype=torch.int64, device=dev)
        variants: dict[str, Callable[[int], object]] = {
            "cublas + argmax": lambda i: argmax_rows(F.linear(x, heads[i % copies]), (d2t, True), out=dst)}
        shipped = HeadPick(8, dev)
        variants["HeadPick (shipped)"] = lambda i: shipped(HeadRows(x, heads[i % copies]), (d2t, True), dst)
        for bn, warps in tiles:
            for pre in (True, False):
                def pick(i: int, bn: int = bn, warps: int = warps, pre: bool = pre, decode: bool = True) -> None:
                    launch_pick(x, heads[i % copies], slot, bn, warps, pre)
                    if decode:
                        launch_decode(slot, d2t, dst)

                tag = f"n{bn} w{warps}{' pre' if pre else ''}"
                variants[f"pick {tag} + decode"] = pick
                if pre:
                    variants[f"pick {tag} alone"] = lambda i, f=pick: f(i, decode=False)
        for name, fn in variants.items():
            dst.zero_()
            slot.fill_(SLOT_EMPTY)
            # bf16 logits can tie or swap neighbours the float64 order separates: a pick whose
            # float64 logit is within bf16 rounding of the best counts as right
            near = logits64 >= logits64.max(-1, keepdim=True).values - 1e-2 * logits64.abs().max()
            mapped = torch.arange(vocab, device=dev) + d2t
            if name.startswith("pick"):  # the slot's index first, then what the reader makes of it
                bn, warps = (int(t[1:]) for t in name.split()[1:3])
                launch_pick(x, heads[0], slot, bn, warps, " pre" in name)
                idx = 0x7FFFFFFF - (slot & 0xFFFFFFFF)
                launch_decode(slot, d2t, dst)
                ok = bool((dst == idx + d2t[idx]).all()) and bool((slot == SLOT_EMPTY).all())
                ok = ok and bool(near.gather(1, idx[:, None]).all())
            else:
                fn(0)
                ok = all(bool((mapped[near[r]] == dst[r]).any()) for r in range(m_rows))
            exact = bool((dst == want).all())
            row: dict[str, Any] = {"rows": m_rows, "variant": name, "pick_ok": ok, "exact": exact}
            if gpu:
                slot.fill_(SLOT_EMPTY)
                row["warm_us"] = timed(lambda i, fn=fn: fn(0)) - base
                row["cold_us"] = timed(fn) - base
            rows.append(row)
            print(f"rows {m_rows} {name:28s} warm {row.get('warm_us', float('nan')):6.2f}  "
                  f"cold {row.get('cold_us', float('nan')):6.2f} us  ok {ok} exact {row['exact']}", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta(dev), "predecessor_us": base, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

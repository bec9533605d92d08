"""Probe for issue 12's bs-1 cycle: a draft LM head and its argmax as ``updraft.spec.head_pick``'s
launches (``HeadPick``) against cuBLAS's head and ``argmax_rows``, at 1, 2, 4 and 8 rows.

Each draft step of the greedy S = 5 cycle ended in cuBLAS's LM head (8,192 x 576 for SmolLM2's
head; no PDL: it starts once the kernel before it has ended) and ``argmax_rows``. The one-launch
heads timed on 2026-11-27 and 2026-12-02 lost by 3-5 us: they read their weights after the PDL
wait and reduced the programs' maxima through a ticket. ``_pick_kernel`` runs one wave of
programs, may load its weight rows before the wait (``preload``), and ends with one packed
``atomic_max`` a row; ``_read_kernel`` maps the index to a target id and empties the slot. This
sweeps its launch shapes: at one row the FMA path (tiles x preload on / off), past one the tensor
cores (tiles) and the FMA path once.

Timed as ``draft_head_probe.py`` does: a CUDA graph of ``reps`` pairs (a GEMV standing for the
down projection, then the variant) minus that GEMV alone; warm (one weight copy, as the chain's
steps 2-5 find the head in L2) and cold (copies rotated past L2). A pick counts as right when its
float64 logit is within bf16 rounding of the best (``exact``: the float64 argmax itself).

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
from attention_bench import meta  # noqa: E402
from draft_head_probe import after_gemv  # noqa: E402

from updraft.ops import gemv  # noqa: E402
from updraft.ops.gemv_config import graph_seconds  # noqa: E402
from updraft.spec.head_pick import EMPTY, HeadPick, HeadRows, launch_pick, launch_read  # noqa: E402
from updraft.spec.sampling_kernels import argmax_rows  # noqa: E402


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
    tiles = [(16, 4), (32, 4), (32, 8), (64, 8)] if gpu else [(16, 2)]
    dot_tiles = [(32, 4), (64, 4), (64, 8), (128, 8)] if gpu else [(16, 2)]
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(dt).to(dev)

    copies = 8 if gpu else 2
    heads = [rnd(vocab, hid, scale=hid ** -0.5) for _ in range(copies)]
    pred_w = rnd(hid, inter, scale=inter ** -0.5)
    pred_x = rnd(1, inter)
    d2t = torch.randint(0, 40000, (vocab,), generator=gen).to(dev)
    rows: list[dict[str, Any]] = []

    timed = after_gemv(pred_x, pred_w, reps)
    base = graph_seconds(lambda: gemv.linear(pred_x, pred_w), reps) * 1e6 if gpu else 0.0
    mapped = torch.arange(vocab, device=dev) + d2t
    for m_rows in (1, 2, 4, 8) if gpu else (1, 3):
        x = rnd(m_rows, hid)
        ids = torch.zeros(m_rows, 6, dtype=torch.long, device=dev)
        dst = ids[:, 1]
        logits64 = x.double() @ heads[0].double().T
        ref = logits64.argmax(-1)
        want = ref + d2t[ref]
        slot = torch.full((m_rows,), EMPTY, dtype=torch.int64, device=dev)
        shipped = HeadPick(8, dev)
        variants: dict[str, Callable[[int], object]] = {
            "cublas + argmax": lambda i: argmax_rows(F.linear(x, heads[i % copies]), (d2t, True), out=dst),
            "HeadPick (shipped)": lambda i: shipped(HeadRows(x, heads[i % copies]), (d2t, True), dst)}
        shapes = ([(bn, w, False, pre) for bn, w in tiles for pre in (True, False)] if m_rows == 1 else
                  [(bn, w, True, True) for bn, w in dot_tiles] + [(32, 4, False, True)])
        for bn, warps, dot, pre in shapes:
            def pick(i: int, bn: int = bn, warps: int = warps, dot: bool = dot, pre: bool = pre) -> None:
                launch_pick(x, heads[i % copies], slot, bn, warps, dot, pre)
                launch_read(slot, (d2t, True), dst)

            variants[f"pick n{bn} w{warps} {'dot' if dot else 'fma'}{' pre' if pre else ''}"] = pick
        # bf16 logits can tie or swap neighbours the float64 order separates: a pick whose float64
        # logit is within bf16 rounding of the best counts as right
        near = logits64 >= logits64.max(-1, keepdim=True).values - 1e-2 * logits64.abs().max()
        for name, fn in variants.items():
            dst.zero_()
            slot.fill_(EMPTY)
            fn(0)
            ok = all(bool((mapped[near[r]] == dst[r]).any()) for r in range(m_rows)) and bool((slot == EMPTY).all())
            exact = bool((dst == want).all())
            row: dict[str, Any] = {"rows": m_rows, "variant": name, "pick_ok": ok, "exact": exact}
            if gpu:
                slot.fill_(EMPTY)
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

"""Probe for issue 14's verify ratio and issue 12's bs-8 cycle: the split merge folded into the
o_proj GEMV, deterministic (``updraft.ops.gemv_merge``), against ``merge_splits`` +
``gemv.linear_add_norm``.

``fold_probe.py`` (H100, 2026-12-05) timed a merge + o_proj fold with float32 atomics: 0.6-0.9 us a
SmolLM2 layer faster at 6-8 rows, 0.15-0.29 at one, before what it left out (the residual add and
the next norm's statistics, clearing the accumulator) and with sums whose last bits vary run to
run. ``gemv_merge`` leaves ``gemv.NormedRows`` exactly as ``linear_add_norm`` does (``stream``,
``scaled``, one ``sumsq`` partial per column tile), so the gate/up launch after it is unchanged and
the timing here is the whole difference a layer sees. Each variant is checked against float64 and
for repeating bit for bit; the launch configs swept are (BLOCK_N, warps).

The first run (2026-12-07, ``benchmarks/results/2026-12-07-h100-merge-fold/probe-i64.json``) also
timed a form adding the heads' products as int64 fixed point (``y * 2^24``) with integer atomics,
the ticket's last program converting the sum: 0.27 us faster than the float32 slices at 6 rows,
the same at 48, with a bounded range; not kept.

    python benchmarks/oproj_fold_probe.py --out results/oproj_fold_probe.json   # GPU
    python benchmarks/oproj_fold_probe.py --smoke                               # CPU, interpreter
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from attention_bench import meta  # noqa: E402

from updraft.attention.triton_backend import TritonBackend  # noqa: E402
from updraft.attention.triton_kernels.merge import merge_splits  # noqa: E402
from updraft.ops import gemv, gemv_merge  # noqa: E402
from updraft.ops.gemv_config import graph_seconds  # noqa: E402

#: (token rows, captured splits, live splits) as the engine's graphs capture them on an H100 (132 SMs,
#: SmolLM2's 3 KV heads): decode bs 1 64 splits, bs 8 22, bs 16 / 32 / 64 11 / 6 / 3; a 6-token verify at
#: bs 1 / 2 / 4 / 8 (6 / 12 / 24 / 48 rows) 44 / 22 / 11 / 11; live at ~1k and ~4k tokens of context
CASES = [(1, 64, 8), (6, 44, 6), (6, 44, 22), (8, 22, 3), (12, 22, 3), (12, 22, 11), (16, 11, 2), (16, 11, 6),
         (24, 11, 2), (24, 11, 6), (32, 6, 2), (48, 11, 2), (48, 11, 6), (48, 11, 11), (64, 3, 1), (64, 3, 3)]
HID, HEADS, D, EPS = 576, 9, 64, 1e-5  # SmolLM2-135M


def case(m: int, splits: int, live: int, copies: int, tiles: list[tuple[int, int]], dev: torch.device,
         dtype: torch.dtype, gen: torch.Generator, merge_heads: tuple[int, ...] = ()) -> tuple[dict[str, tuple[Callable[[int], None], Callable[[], gemv.NormedRows]]], torch.Tensor]:
    ws = [(torch.randn(HID, HEADS * D, generator=gen) / (HEADS * D) ** 0.5).to(dtype).to(dev) for _ in range(copies)]
    mid_o = torch.randn(m, HEADS, splits, D, generator=gen)
    lse = torch.randn(m, HEADS, splits, generator=gen) * 3
    lse[:, :, live:] = float("-inf")
    mid_o[:, :, live:] = 0.0  # the decode kernel writes zeros past the context (``written``)
    mid_o, mid_lse = mid_o.to(dev), lse.to(dev)
    res = torch.randn(m, HID, generator=gen).to(dtype).to(dev)
    nw = (1 + 0.1 * torch.randn(HID, generator=gen)).to(dtype).to(dev)
    wts = torch.softmax(lse.double() * torch.log(torch.tensor(2.0, dtype=torch.float64)), -1)
    merged = (wts[..., None] * mid_o.double().cpu()).sum(2).reshape(m, HEADS * D).to(dtype).double()
    ref = (merged.to(dev) @ ws[0].double().T).to(dtype).double() + res.double()
    x = torch.empty(m, HEADS, D, dtype=dtype, device=dev)

    def prod(i: int, pdl: bool = True, hm: int | None = None) -> gemv.NormedRows:
        merge_splits(mid_o, mid_lse, x, "attention", pdl, written=True, heads_per_program=hm)
        return gemv.linear_add_norm(x.view(m, HEADS * D), ws[i % copies], res, nw, EPS)

    out: dict[str, tuple[Callable[[int], None], Callable[[], gemv.NormedRows]]] = {
        "merge + linear_add_norm": (prod, lambda: prod(0))}
    # The engine launches a 41-64-row verify block's merge without PDL (``verify_no_pdl_rows``), and
    # the fold there takes that setting (``SplitPartials.pdl``): both forms are timed at those rows.
    lo, hi = TritonBackend.verify_no_pdl_rows
    no_pdl = lo <= m <= hi
    if no_pdl:
        out["merge(no PDL) + linear_add_norm"] = (lambda i: prod(i, False), lambda: prod(0, False))
        # The merge on PDL with other grids (``--merge-heads``): H100, 2026-12-07, the pair doubled from
        # 128 programs up (48 rows x 3 programs of 4 heads, 144: 11.6 us; at 96 or 48 programs 5.2 / 5.0), hence
        # ``TritonBackend.merge_pdl_grid`` (results/2026-12-07-h100-merge-fold/call3).
        for hm in merge_heads:
            out[f"merge(PDL, {hm} heads) + linear_add_norm"] = (lambda i, hm=hm: prod(i, True, hm),
                                                                 lambda hm=hm: prod(0, True, hm))
    for tile in tiles:
        for pdl in (True, False) if no_pdl else (True,):
            def run(i: int, tile: tuple[int, int] = tile, pdl: bool = pdl) -> gemv.NormedRows:
                return gemv_merge.merge_linear_add_norm(mid_o, mid_lse, ws[i % copies], res, nw, EPS, tile=tile,
                                                        pdl=pdl)

            out[f"fold n{tile[0]} w{tile[1]}{'' if pdl else ' no PDL'}"] = (run, lambda run=run: run(0))
    return out, ref


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="small cases under the Triton interpreter (CPU)")
    ap.add_argument("--rows", type=int, nargs="*", default=None, help="only the cases of these token rows")
    ap.add_argument("--merge-heads", type=int, nargs="*", default=[],
                    help="at 41-64 rows also the merge on PDL with these heads a program (its grid)")
    ap.add_argument("--no-fold", action="store_true", help="the production pairs only")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("oproj_fold_probe: needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(0)
    tiles = [(16, 4), (32, 4), (64, 4), (32, 8), (64, 8)] if cuda else [(64, 4), (16, 4)]
    cases = CASES if cuda else [(1, 8, 3), (6, 8, 5), (48, 4, 2)]
    if args.rows:
        cases = [c for c in cases if c[0] in args.rows]
    rows: list[dict[str, object]] = []
    summary: list[str] = []
    for m, splits, live in cases:
        variants, ref = case(m, splits, live, 64 if cuda else 2, [] if args.no_fold else tiles, dev, dtype, gen,
                             tuple(args.merge_heads))
        base_out = variants["merge + linear_add_norm"][1]()
        timed: dict[str, float] = {}
        for name, (run, result) in variants.items():
            got = result()
            err = float((got.stream.double() - ref).abs().max() / ref.abs().max())
            same = [bool(torch.equal(got.stream, base_out.stream)), bool(torch.equal(got.scaled, base_out.scaled))]
            again = result()  # deterministic: a second launch equals the first bit for bit
            repeat = bool(torch.equal(again.stream, got.stream) and torch.equal(again.sumsq, got.sumsq))
            row: dict[str, object] = dict(rows=m, splits=splits, live=live, variant=name, rel_err=err,
                                          equal_production=same, repeats=repeat)
            if cuda:
                calls = [0]

                def rep(run: Callable[[int], object] = run) -> None:
                    run(calls[0])
                    calls[0] += 1

                timed[name] = row["us"] = graph_seconds(rep, 64) * 1e6
            rows.append(row)
            print(f"m{m} s{splits} l{live} {name:26s} {row.get('us', float('nan')):7.2f} us  err {err:.1e} "
                  f"eq {same} rep {repeat}", flush=True)
            if not repeat or err > (2e-2 if cuda else 1e-5):
                print(f"FAIL: {name} at m={m}: err {err:.2e}, repeats {repeat}", file=sys.stderr)
                return 1
        if timed:
            base = "merge(no PDL) + linear_add_norm" if "merge(no PDL) + linear_add_norm" in timed \
                else "merge + linear_add_norm"
            best = min((k for k in timed if k != base), key=timed.__getitem__)
            summary.append(f"m={m} splits={splits} live={live}: production ({base}) {timed[base]:.2f} us, best "
                           f"{best} {timed[best]:.2f} us ({timed[best] - timed[base]:+.2f})")
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"meta": meta(dev), "rows": rows, "summary": summary}, indent=1))
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

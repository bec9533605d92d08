"""The context-token pick against the plain draft argmax, one draft step's launch each (issue 12:
context tokens lost 4-30% of the speed at bs 1-64 on the H100, 2026-12-05).

``spec.context_vocab.context_pick`` scores each row's held context tokens (up to K) against the
normed feature after the vocabulary's argmax; ``argmax_rows`` is what a draft step runs without
them. Timed as CUDA graphs of back-to-back launches (``gemv_config.graph_seconds``) at batch sizes
x held counts, SmolLM2's head (hidden 576, 8,192-token draft vocabulary) and an 8B-shaped one
(4,096, 32,000). Prints a table; ``--out`` writes JSON. On a CPU it checks the two agree at tiny
sizes under the Triton interpreter and stops (no timings).

    python benchmarks/context_pick_bench.py --out pick.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: a base tree there is timed

from updraft.ops.gemv_config import graph_seconds, triton_next_pow2  # noqa: E402
from updraft.spec import context_vocab  # noqa: E402
from updraft.spec.context_vocab import context_pick, context_pick_reference  # noqa: E402
from updraft.spec.sampling_kernels import argmax_rows  # noqa: E402

_TICKETS = "tickets" in inspect.signature(context_pick).parameters
_TILES = "tiles" in inspect.signature(context_pick).parameters  # a base tree may lack launch shapes
PickTiles = getattr(context_vocab, "PickTiles", None)
SHAPES = {"smollm2": (576, 8192), "8b": (4096, 32000)}


def sweep_tiles(hidden: int) -> list[PickTiles]:
    """Launch shapes around the default: held tokens a program x warps (register tiles of at most
    ~32k values a program)."""
    ks = [bk for bk in (2, 4, 8, 16, 32, 64) if bk * triton_next_pow2(hidden) <= 32768]
    return [PickTiles(bk, w) for bk in ks for w in (4, 8, 16)]


def case(hidden: int, vocab: int, bs: int, held: int, k: int, device: str, dtype: torch.dtype,
         sweep: bool = False) -> dict[str, object]:
    g = torch.Generator(device="cpu").manual_seed(bs * 1000 + held)
    logits = torch.randn(bs, vocab, generator=g).to(device)
    feat = torch.randn(bs, hidden, generator=g).to(device, dtype)
    norm_w = torch.rand(hidden, generator=g).to(device, dtype)
    ids = torch.full((bs, k), -1, dtype=torch.long)
    ids[:, :held] = torch.randint(vocab, 100_000, (bs, held), generator=g)
    ids = ids.to(device)
    rows = torch.randn(bs, k, hidden, generator=g).to(device, dtype)
    count = torch.full((bs,), held, dtype=torch.int32, device=device)
    req = torch.arange(bs, device=device)
    d2t = torch.zeros(vocab, dtype=torch.long, device=device)
    dst = torch.empty(bs, dtype=torch.long, device=device)
    out = torch.empty(bs, dtype=torch.long, device=device)
    # the engine's counters live as long as its head; a base tree's one-program pick takes none
    kw = {"tickets": torch.zeros(bs, dtype=torch.int32, device=device)} if _TICKETS else {}

    def pick() -> object:
        return context_pick(logits, feat, norm_w, 1e-5, ids, rows, req, dst, (d2t, True), count=count, bias=3.5, **kw)

    def plain() -> object:
        return argmax_rows(logits, (d2t, True), out=out)

    pick()
    ref = context_pick_reference(logits, feat, norm_w, 1e-5, ids, rows, req, (d2t, True), bias=3.5)
    agree = bool(torch.equal(dst.cpu(), ref.cpu()))
    row = {"hidden": hidden, "vocab": vocab, "bs": bs, "held": held, "k": k, "agrees_with_reference": agree}
    if device == "cuda":
        plain()
        row["argmax_us"] = graph_seconds(plain, 50) * 1e6
        row["pick_us"] = graph_seconds(pick, 50) * 1e6
        if sweep:  # every shape checked against the reference before it is timed
            row["sweep"] = []
            for tiles in sweep_tiles(hidden):
                kw["tiles"] = tiles
                pick()
                ok = bool(torch.equal(dst.cpu(), ref.cpu()))
                row["sweep"].append({"block_k": tiles.block_k, "num_warps": tiles.num_warps, "agrees": ok,
                                     "pick_us": graph_seconds(pick, 50) * 1e6})
            kw.pop("tiles")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bs", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--held", type=int, nargs="+", default=[0, 16, 64, 256])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--sweep", action="store_true", help="also time other launch shapes (PickTiles) per case")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    rows = []
    if not cuda:  # the interpreter: agreement at tiny sizes only
        for bs, held in ((1, 0), (3, 5), (4, 16)):
            rows.append(case(32, 300, bs, held, 16, "cpu", torch.float32))
            print(rows[-1])
        return
    for shape in args.shapes:
        hidden, vocab = SHAPES[shape]
        for bs in args.bs:
            for held in args.held:
                r = case(hidden, vocab, bs, held, max(args.held), "cuda", torch.bfloat16, args.sweep and _TILES)
                r["shape"] = shape
                rows.append(r)
                print(f"{shape:8s} bs {bs:3d} held {held:4d}: argmax {r['argmax_us']:7.2f} us  pick {r['pick_us']:7.2f} us  "
                      f"agrees {r['agrees_with_reference']}", flush=True)
                if r.get("sweep"):
                    best = min(r["sweep"], key=lambda e: e["pick_us"])
                    bad = sum(not e["agrees"] for e in r["sweep"])
                    print(f"{'':8s} sweep: best block_k {best['block_k']} warps {best['num_warps']} {best['pick_us']:7.2f} us; "
                          + " ".join(f"{e['block_k']}/{e['num_warps']}:{e['pick_us']:.1f}" for e in r["sweep"])
                          + (f"; {bad} DISAGREE" if bad else ""), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
                                       indent=1))


if __name__ == "__main__":
    main()

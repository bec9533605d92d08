"""CPU float32: the two forms ``ops.dense`` chooses between, ``F.linear`` and ``(W @ x.T).T``
(``mm``), at decode and verify sizes, on one model's weight shapes streamed from memory as a forward
streams them (every layer's own matrices, so no product finds its weight in cache). Prints a table of
milliseconds per forward's worth of products (layers, LM head) for each row count, with the ratio,
then the plan ``ops.dense.calibrate`` makes on the same weights, and writes JSON under --out.

    python benchmarks/cpu_dense.py --rows 1,2,3,4,6,8,16,64 --out benchmarks/results/DIR
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from updraft.ops.dense import MAX_ROWS, calibrate, mm_product
from updraft.provenance import cpu_name

#: SmolLM2-135M: per layer qkv, o, gate_up, down as (out, in); the tied LM head
LAYER_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
LM_HEAD = (49152, 576)
LAYERS = 30


def forward_ms(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], weights: list[list[torch.Tensor]],
               head: torch.Tensor, rows: int, repeats: int) -> tuple[float, float]:
    """Best of ``repeats`` passes over every layer's products, then the LM head (ms, ms)."""
    xs = [torch.randn(rows, k) for _, k in LAYER_SHAPES]
    xh = torch.randn(rows, head.shape[1])
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        t0 = time.perf_counter()
        for layer in weights:
            for x, w in zip(xs, layer):
                fn(x, w)
        t1 = time.perf_counter()
        fn(xh, head)
        t2 = time.perf_counter()
        best = (min(best[0], (t1 - t0) * 1e3), min(best[1], (t2 - t1) * 1e3))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,3,4,6,8,16,64")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    weights = [[torch.randn(n, k) for n, k in LAYER_SHAPES] for _ in range(LAYERS)]
    head = torch.randn(*LM_HEAD)
    paths = {"F.linear": F.linear, "mm": mm_product}
    rows_out = []
    print(f"{'rows':>5} {'F.linear layers+head':>22} {'mm layers+head':>23} {'F.linear / mm':>14}")
    for m in (int(r) for r in args.rows.split(",")):
        if not 1 <= m <= MAX_ROWS:
            ap.error(f"--rows {m}: the mm form takes 1 to {MAX_ROWS} rows")
        res = {name: forward_ms(fn, weights, head, m, args.repeats) for name, fn in paths.items()}
        (la, ha), (lb, hb) = res["F.linear"], res["mm"]
        ratio = (la + ha) / (lb + hb)
        print(f"{m:>5} {la:>11.1f} + {ha:>6.1f} ms {lb:>12.1f} + {hb:>6.1f} ms {ratio:>13.2f}x")
        rows_out.append({"rows": m, "f_linear_ms": [la, ha], "mm_ms": [lb, hb], "f_linear_over_mm": ratio})
    chosen = calibrate([w for layer in weights for w in layer] + [head])
    print(chosen.describe())
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"machine": cpu_name(), "threads": torch.get_num_threads(),
                "torch": torch.__version__, "layers": LAYERS, "layer_shapes": LAYER_SHAPES, "lm_head": LM_HEAD}
        plan = {"source": chosen.source, "mm_rows": sorted(chosen.mm_buckets),
                "ms_per_pass": {m: list(v) for m, v in chosen.ms.items()}}
        (args.out / "cpu_dense.json").write_text(json.dumps({"meta": meta, "rows": rows_out, "plan": plan}, indent=1))


if __name__ == "__main__":
    main()

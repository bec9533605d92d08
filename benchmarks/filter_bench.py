"""The sampled acceptance's filter kernel on its own (issue 12): per launch shape (block x warps)
its registers and spills and its time per call inside a CUDA graph, for the filters the
benchmarks sample with (T 0.7 top-p 0.9; T 1 top-k 50 top-p 0.95), min-p 0.1 and none (the
statistics pass alone), at 6, 48 and 384 rows (bs 1, 8 and 64 at S = 5; every row one request's,
so all rows run the filter asked for).

Rows are real verify logits when ``--logits`` names a file (a [R, V] tensor saved by
``torch.save``, e.g. SmolLM2's next-token logits along sampled continuations), else scaled
Gaussian rows (their nucleus is far wider than a language model's).

    python benchmarks/filter_bench.py --logits rows.pt --out OUT
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from sampled_tune import _graph_ms  # noqa: E402

from updraft.provenance import git_commit  # noqa: E402
from updraft.runtime.sampler import GREEDY_TEMPERATURE  # noqa: E402
from updraft.spec import rejection_kernels as rk  # noqa: E402

#: (name, temperature, top_k, top_p, min_p)
FILTERS = (("stats_only", 0.7, 0, 1.0, 0.0), ("top_p_0.9", 0.7, 0, 0.9, 0.0),
           ("top_k_50_top_p_0.95", 1.0, 50, 0.95, 0.0), ("min_p_0.1", 1.0, 0, 1.0, 0.1))


def launch(x: torch.Tensor, params: tuple[torch.Tensor, ...], block: int, warps: int) -> Any:
    """``filter_rows``'s launch with the given block and warps (every row request 0's); returns
    the compiled kernel."""
    temp, top_k, top_p, min_p = params
    rows, vocab = x.shape
    stats = torch.empty((rows, rk.NUM_STATS), dtype=torch.float32, device=x.device)
    tiles = torch.empty((rows, rk.TILE), dtype=torch.float32, device=x.device)
    return rk._filter_kernel[(rows,)](
        x, x.stride(0), temp, 1, top_k, 1, top_p, 1, min_p, 1, stats, tiles, rows, GREEDY_TEMPERATURE,
        math.log2(rk.PROBE_CAP), V=vocab, BLOCK=block, TILE=rk.TILE, CHUNK=rk._CHUNK,
        KEY_AFTER=rk._KEY_AFTER, NS=rk.NUM_STATS, SKIP_CUTS=False, num_warps=warps)


def resources(kernel: Any) -> dict[str, int | None]:
    try:
        kernel._init_handles()
        return {"regs": int(kernel.n_regs), "spills": int(kernel.n_spills)}
    except Exception:  # noqa: BLE001 (an API another triton version lacks)
        return {"regs": None, "spills": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logits", default=None)
    ap.add_argument("--rows", default="6,48,384")
    ap.add_argument("--blocks", default="1024,2048,4096")
    ap.add_argument("--warps", default="4,8,16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    src = torch.load(args.logits).float().cuda() if args.logits else torch.randn(48, 49152, device="cuda") * 4
    out: dict[str, Any] = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "logits": args.logits or "gaussian*4", "default": [rk._BLOCK, rk._WARPS], "results": []}
    for nrows in (int(r) for r in args.rows.split(",")):
        x = src[torch.arange(nrows, device="cuda") % src.shape[0]].contiguous()
        for (name, t, k, p, mp), block, warps in itertools.product(
                FILTERS, (int(b) for b in args.blocks.split(",")), (int(w) for w in args.warps.split(","))):
            params = tuple(torch.full((1,), v, device="cuda", dtype=torch.float32) for v in (t, k, p, mp))
            try:
                res = resources(launch(x, params, block, warps))
                us = _graph_ms(lambda x=x, pr=params, b=block, w=warps: launch(x, pr, b, w), args.iters) * 1e3
            except Exception as e:  # noqa: BLE001 (a shape the compiler refuses)
                print(f"rows {nrows} {name} block {block} warps {warps}: {type(e).__name__}: {str(e)[:80]}")
                continue
            out["results"].append({"rows": nrows, "filter": name, "block": block, "warps": warps, "us": us, **res})
            print(f"rows {nrows:3d} {name:20s} block {block:4d} warps {warps:2d}: {us:7.1f} us  regs {res['regs']} "
                  f"spills {res['spills']}", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "filter_bench.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

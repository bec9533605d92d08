"""The sampled cycle's two costliest parts on the GPU (issue 12), side by side in one process:
the S = 5 sampled iteration (SmolLM2 + head, T = 0.7 top-p 0.9, real verify logits) against the
greedy one, with the draft steps' top-64 from torch.topk and from the Triton ``topk_rows``
(``sampling_kernels.TOPK_ON_CUDA``; the kernel is first checked on the device against torch and
its reference), the top-64 alternatives on their own (eager, and per call inside a CUDA graph),
and with ``--sweep-filter`` the filter kernel's launch shapes (block x warps; tile 256).

    python benchmarks/sampled_tune.py --smollm SmolLM2-135M-Instruct.Q4_1.gguf --out OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from spec_iteration import (  # noqa: E402
    _median_event_ms,
    add_cost_args,
    args_text,
    fused_ms,
    head_method,
    park,
    smollm_engine_config,
)

from updraft.config import SpeculativeConfig  # noqa: E402
from updraft.engine.engine import Engine  # noqa: E402
from updraft.provenance import git_commit  # noqa: E402
from updraft.spec import rejection_kernels as rk  # noqa: E402
from updraft.spec import sampling_kernels as sk  # noqa: E402


def cycle_ms(eng: Engine, bs: int, sampled: bool, context: int, iters: int, text: list[int] | None) -> float:
    """The S = 5 iteration at ``bs``, its graph recaptured with the kernels' current constants
    (``text``: the requests' context, ``fake_requests``)."""
    reqs = park(eng, bs, context, text, sampled)
    drv = eng.driver
    assert drv is not None
    drv.fused.graphs.pop((5, sampled, drv.fused.bucket(bs)), None)
    ms = fused_ms(eng, reqs, iters, 5, sampled)
    for r in reqs:
        eng.scheduler.release(r)
    return ms


def _graph_ms(fn: Callable[[], object], iters: int, calls: int = 10) -> float:
    """Per call, ``calls`` calls captured in one CUDA graph: the launch gaps an eager event pair
    around one small launch also measures (a Triton launch's host time most of all) are gone,
    as in the iteration graph."""
    fn()  # compile / warm up outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return _median_event_ms(g.replay, iters) / calls


def topk_ms(bs: int, vocab: int, k: int, iters: int) -> dict[str, float]:
    x = torch.randn(bs, vocab, device="cuda", dtype=torch.bfloat16)
    # The kernel checked on the device first (its in-place sort relies on the barrier semantics
    # the interpreter never exercises): the values torch finds, exactly the reference's indices.
    vals, idx = sk.topk_rows(x, k)
    want = x.topk(k, dim=-1)
    assert torch.equal(vals, want.values.float()) and torch.equal(x.gather(1, idx), want.values)
    assert torch.equal(idx, sk.topk_rows_reference(x, k)[1])
    return {"topk": _median_event_ms(lambda: x.topk(k, dim=-1), iters),
            "topk_unsorted": _median_event_ms(lambda: x.topk(k, dim=-1, sorted=False), iters),
            "sort_slice": _median_event_ms(lambda: x.sort(dim=-1, descending=True), iters),
            "float_topk": _median_event_ms(lambda: x.float().topk(k, dim=-1), iters),
            "triton_topk_rows": _median_event_ms(lambda: sk.topk_rows(x, k), iters),
            "graph_topk": _graph_ms(lambda: x.topk(k, dim=-1), iters),
            "graph_triton_topk_rows": _graph_ms(lambda: sk.topk_rows(x, k), iters)}


def filter_sweep(eng: Engine, bs: int, greedy: float, context: int, iters: int, text: list[int] | None
                 ) -> list[dict[str, Any]]:
    """The sampled cycle for each launch shape of the filter kernel (block x tile x warps)."""
    default = (rk._BLOCK, rk.TILE, rk._WARPS)
    rows = []
    for block, tile, warps in itertools.product((1024, 2048, 4096), (256,), (4, 8, 16)):
        rk._BLOCK, rk.TILE, rk._WARPS = block, tile, warps
        try:
            ms = cycle_ms(eng, bs, True, context, iters, text)
        except Exception as e:  # noqa: BLE001 (a shape the compiler refuses: out of resources)
            print(f"bs {bs} block {block} tile {tile} warps {warps}: {type(e).__name__}: {str(e)[:80]}")
            continue
        rows.append({"block": block, "tile": tile, "warps": warps, "sampled_ms": ms, "over_greedy": ms / greedy})
        print(f"bs {bs} block {block:5d} tile {tile:4d} warps {warps:2d}: sampled {ms:.3f} ms = {ms / greedy:.3f}x greedy", flush=True)
    rk._BLOCK, rk.TILE, rk._WARPS = default
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cost_args(ap, "1")
    ap.add_argument("--sweep-filter", action="store_true", help="also the filter kernel's launch shapes (block x warps)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    base = smollm_engine_config(args.smollm, sizes, args.context)
    spec = SpeculativeConfig(method=head_method(args.head), draft_model=args.head, num_steps=5, adaptive=False)
    eng = Engine(dataclasses.replace(base, speculative=spec))
    text = args_text(args, eng, sizes)
    out: dict[str, Any] = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "context": "unwritten KV" if text is None else "mt_bench text"}
    for bs in sizes:
        greedy = cycle_ms(eng, bs, False, args.context, args.iters, text)
        default_topk = sk.TOPK_ON_CUDA
        res: dict[str, Any] = {"greedy_ms": greedy, "topk_8192": topk_ms(bs, 8192, 64, args.iters)}  # checks topk_rows first
        for name, on in (("sampled_torch_topk_ms", False), ("sampled_topk_rows_ms", True)):
            sk.TOPK_ON_CUDA = on
            res[name] = cycle_ms(eng, bs, True, args.context, args.iters, text)
        sk.TOPK_ON_CUDA = default_topk
        res["sampled_ms"] = res["sampled_topk_rows_ms" if default_topk else "sampled_torch_topk_ms"]
        if args.sweep_filter:
            res["filter_shapes"] = filter_sweep(eng, bs, greedy, args.context, args.iters, text)
        print(f"bs {bs}: greedy {greedy:.3f} ms, sampled with torch topk {res['sampled_torch_topk_ms']:.3f} ms "
              f"({res['sampled_torch_topk_ms'] / greedy:.3f}x), with topk_rows {res['sampled_topk_rows_ms']:.3f} ms "
              f"({res['sampled_topk_rows_ms'] / greedy:.3f}x); "
              f"top-64 of 8192: {res['topk_8192']}", flush=True)
        out[f"bs{bs}"] = res
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "sampled_tune.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

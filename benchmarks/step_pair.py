"""Decode and 6-token verify steps side by side, each graph captured fresh in one process.

    python benchmarks/step_pair.py --out DIR [--models smollm2] [--batch-sizes 1,8]

``decode_kernels.py`` times many variants one after another in one process; on the H100
(2026-11-26) its later graphs replayed 60-110 us slower than their kernels' GPU-busy time (the
same SmolLM2 verify graph: 0.795 ms measured second, 0.856-0.864 measured after other
variants), so its verify / decode ratio read 1.25 where a clean pair reads 1.16. This script
times only the default path (the fused layers under the "auto" policy), decode then verify per
batch size, and reports per graph: back-to-back replay time, the median of single synced
replays, the kernels' busy time (torch profiler) and the host time to enqueue one replay.
Random weights, --context tokens of KV. ``--variants`` runs rounds under the backend settings of
``cycle_variants.py``'s knobs (e.g. ``base,no_prewarm,base,no_prewarm`` for alternating pairs; each
round's graphs are captured under its settings, with an empty launch-config cache as there).
Writes ``step_pair.json`` under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import decode_kernels as dk  # noqa: E402
from attention_bench import meta  # noqa: E402
from cycle_variants import apply, parse_variants  # noqa: E402

from updraft.batch import ForwardMode  # noqa: E402
from updraft.ops import gemv_config  # noqa: E402


def capture(model: torch.nn.Module, mode: ForwardMode, bs: int, context: int) -> tuple[torch.cuda.CUDAGraph, Any]:
    runner, batch = dk.step_batch(model, mode, context, bs)
    return dk.capture_graph(model, batch), (runner, batch)


def synced_ms(graph: torch.cuda.CUDAGraph, n: int = 30) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(n):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[n // 2]


def host_us(graph: torch.cuda.CUDAGraph, n: int = 30) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        graph.replay()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default="smollm2")
    ap.add_argument("--batch-sizes", default="1")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--variants", default="base",
                    help="comma-separated rounds, each a cycle_variants.py variant: base (as shipped) or "
                         "'+'-joined knobs, e.g. base,no_prewarm,base,no_prewarm for alternating pairs")
    args = ap.parse_args()
    variants = parse_variants(args.variants)
    if any("tiles" in knobs for _, knobs in variants):
        ap.error("--variants: the 'tiles' knob needs cycle_variants.py's --tiles-json")
    os.environ["UPDRAFT_CACHE"] = tempfile.mkdtemp(prefix="step_pair_")  # apply() empties its cache file
    cache = gemv_config.cache_path()
    torch.manual_seed(0)
    rows = []
    for name in args.models.split(","):
        model = dk.random_model(dk.MODELS[name])
        for rnd, (variant, knobs) in enumerate(variants):
            apply(knobs, {}, cache)  # read at capture: the graphs below keep it
            for bs in (int(b) for b in args.batch_sizes.split(",")):
                pair = {}
                for mode in (ForwardMode.DECODE, ForwardMode.TARGET_VERIFY):
                    graph, keep = capture(model, mode, bs, args.context)
                    kernels, busy, _, per_name = dk.profile_replay(graph)
                    r = dict(model=name, bs=bs, mode=mode.name, variant=variant, round=rnd,
                             replay_ms=dk.replay_time(graph) * 1e3, synced_ms=synced_ms(graph), busy_ms=busy / 1e3,
                             kernels=kernels, host_us=host_us(graph), kernel_us=per_name)
                    rows.append(r)
                    pair[mode] = r
                    del graph, keep
                ratio = pair[ForwardMode.TARGET_VERIFY]["replay_ms"] / pair[ForwardMode.DECODE]["replay_ms"]
                rows[-1]["verify_over_decode"] = ratio
        apply(frozenset(), {}, cache)
        del model
        torch.cuda.empty_cache()
    dk.show(f"decode and verify at {args.context} tokens of context (CUDA graphs, default path)", rows,
            ["model", "bs", "mode", "variant", "replay_ms", "synced_ms", "busy_ms", "kernels", "host_us"])
    for r in rows:
        if "verify_over_decode" in r:
            print(f"{r['model']} bs {r['bs']} {r['variant']}: verify / decode = {r['verify_over_decode']:.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "step_pair.json").write_text(json.dumps(dict(meta=meta(torch.device("cuda")), rows=rows), indent=1))


if __name__ == "__main__":
    main()

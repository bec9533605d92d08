"""The engine's plain iteration against the bare forward graph ``step_pair.py`` times, kernel by kernel (GPU).

Forward-graph gains have kept shrinking in the engine: loading the GEMV epilogues before their K loops took 2% off
the forward graph and 0.2% off the engine's plain step (``results/2026-12-06-h100-epilogue-loads``), the merge's
ungated loads 3% and 0.2-0.8% (``results/2026-12-06-h100-merge-loads``). This probe builds both on one random
SmolLM2 (bs 1, ``--context`` tokens): the plain engine's fused iteration (``spec_iteration.fused_ms``'s replay) and
``step_pair``'s DECODE graph (``decode_kernels.step_batch``, whose table is ``context + 64`` wide where the engine's
is its ``max_model_len``). Per side, over ``--iters`` replays under the profiler: the replay time (CUDA events), the
kernels, the span from the first kernel's start to the last one's end, GPU-busy time, the idle gaps between kernels,
and per kernel name the count and time a replay; then each side's attention plan (KV splits, tile). Prints a short
table; ``--out`` writes JSON with both sides' kernel sequences (name, start offset, duration; us).

    python benchmarks/engine_forward_probe.py --context 512 --out probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
import decode_kernels as dk  # noqa: E402
from cycle_profile import _kernels  # noqa: E402
from spec_iteration import fake_requests, smollm_engine_config  # noqa: E402

from updraft.batch import ForwardMode  # noqa: E402
from updraft.bench.models import random_model  # noqa: E402
from updraft.engine.engine import Engine  # noqa: E402
from updraft.provenance import git_commit  # noqa: E402


def timeline(run: Any, iters: int, skip: int = 0) -> dict[str, Any]:
    """``run()`` enqueues one replay and returns its device seconds; the kernels of ``iters`` replays,
    each replay's first ``skip`` left out (the engine's ``admit`` writes before each replay)."""
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    secs = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            secs.append(run() * 1e3)
    return summarize(_kernels(prof), secs, iters, skip)


def summarize(events: list[Any], secs: list[float], iters: int, skip: int = 0) -> dict[str, Any]:
    """The table's figures from the profiled kernels of ``iters`` replays (events with ``name`` and
    ``time_range.start`` / ``.end`` in us) and the replays' times (ms); see ``timeline``."""
    kernels = sorted(events, key=lambda ev: ev.time_range.start)
    per = len(kernels) // iters
    spans, gaps, busy = [], [], []
    names: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for i in range(iters):
        block = kernels[i * per + skip:(i + 1) * per]
        t0 = block[0].time_range.start
        spans.append(block[-1].time_range.end - t0)
        end, idle, total = t0, 0.0, 0.0
        for ev in block:
            dur = ev.time_range.end - ev.time_range.start
            idle += max(0.0, ev.time_range.start - end)  # idle: time no kernel of the replay was running
            end, total = max(end, ev.time_range.end), total + dur
            names[ev.name[:70]][0] += dur / iters
            names[ev.name[:70]][1] += 1 / iters
        busy.append(total)
        gaps.append(idle)
    first = kernels[skip:per]
    return {
        "replay_ms": statistics.median(secs), "kernels": per - skip, "span_us": statistics.median(spans),
        "busy_us": statistics.median(busy), "idle_us": statistics.median(gaps),
        "per_name": {k: [round(v[0], 2), round(v[1], 2)] for k, v in sorted(names.items(), key=lambda x: -x[1][0])},
        "sequence": [[ev.name[:70], round(ev.time_range.start - first[0].time_range.start, 2),
                      round(ev.time_range.end - ev.time_range.start, 2)] for ev in first],
    }


def engine_side(loaded: Any, context: int, iters: int) -> tuple[dict[str, Any], str]:
    eng = Engine(smollm_engine_config("random", [1], context), loaded=loaded)
    drv = eng.driver
    assert drv is not None, eng.graph_log
    reqs = fake_requests(eng, 1, context)

    def run() -> float:
        drv.admit(reqs)
        inf = drv.fused.launch(reqs, 0, False)
        inf.wait()
        return inf.seconds()

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as solo:  # admit's own kernels, left out of each replay
        drv.admit(reqs)
        torch.cuda.synchronize()
    out = timeline(run, iters, skip=len(_kernels(solo)))
    return out, f"req_to_token width {eng.req_pool.req_to_token.shape[1]}"


def forward_side(model: torch.nn.Module, context: int, iters: int) -> tuple[dict[str, Any], Any]:
    runner, batch = dk.step_batch(model, ForwardMode.DECODE, context, 1)
    graph = dk.capture_graph(model, batch)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def run() -> float:
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3

    return timeline(run, iters), batch.attn_metadata.plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    loaded = random_model("random:smollm2-135m", torch.bfloat16, "cuda")
    fwd, plan = forward_side(loaded.model, args.context, args.iters)
    eng, eng_plan = engine_side(loaded, args.context, args.iters)
    print(f"{'':24}{'engine plain step':>20}{'forward graph':>16}")
    for key in ("replay_ms", "kernels", "span_us", "busy_us", "idle_us"):
        print(f"{key:24}{eng[key]:>20.3f}{fwd[key]:>16.3f}")
    print(f"forward graph's attention plan: {plan}\nengine: {eng_plan}")
    names = list(dict.fromkeys(list(eng["per_name"]) + list(fwd["per_name"])))
    print(f"\n{'kernel (us / count a replay)':72}{'engine':>16}{'forward':>16}")
    for n in names[:40]:
        e, f = eng["per_name"].get(n, [0, 0]), fwd["per_name"].get(n, [0, 0])
        print(f"{n:72}{e[0]:>9.1f} /{e[1]:>4.0f}{f[0]:>9.1f} /{f[1]:>4.0f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "context": args.context,
                                    "forward_plan": str(plan), "engine_plan": eng_plan, "engine": eng, "forward": fwd}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

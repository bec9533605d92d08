"""Adaptive S's start-up costs on the GPU: how far a graph's first replay after capture sits from
its warm ones. Random-weight SmolLM2 (no GGUF) with ``--head`` and adaptive speculation, graphs at
``--sizes``: prints the start-up cost table the engine built
(``fastest_replay``: one untimed replay, then the fastest of two), then captures every greedy
(S, bs) graph again and times its first three replays one by one (the first is what start-up
used to time). Writes JSON to --out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from updraft.bench.models import random_model
from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.runtime.launcher import replay_seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--sizes", default="1,2,4,8,24", help="captured batch sizes (comma-separated)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    loaded = random_model("random:smollm2-135m", torch.bfloat16, "cuda")
    spec = SpeculativeConfig(method="eagle3", draft_model=args.head, num_steps=5)
    sizes = [int(x) for x in args.sizes.split(",")]
    eng = Engine(EngineConfig(model="random", device="cuda", dtype="bfloat16", progress=False, cuda_graph_bs=sizes,
                              max_running_requests=max(sizes), max_total_tokens=200_000, speculative=spec), loaded=loaded)
    drv = eng.driver
    assert drv is not None, eng.graph_log
    startup = drv.adaptive.snapshot()["cost_ms"]
    print("start-up costs (ms):", json.dumps(startup), flush=True)
    fused, rows = drv.fused, {}
    for bs in fused.sizes:
        for s in drv.adaptive.choices:
            fused.graphs.pop((s, False, bs), None)
            g = fused.graph_for(s, False, bs)  # captured anew
            g.rows.zero_()
            g.rows_now = None
            ms = [round(t * 1e3, 4) for t in replay_seconds(g.graph.replay, 3)]
            rows[f"S={s},bs={bs}"] = {"replays_ms": ms, "startup_ms": startup.get(f"S={s},bs={bs}")}
    print(f"{'graph':<12} {'1st':>8} {'2nd':>8} {'3rd':>8} {'1st/min':>8} {'start-up':>9}")
    for k, v in rows.items():
        r = v["replays_ms"]
        print(f"{k:<12} {r[0]:8.4f} {r[1]:8.4f} {r[2]:8.4f} {r[0] / min(r[1:]):8.2f} {v['startup_ms'] or 0:9.4f}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "startup_costs.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

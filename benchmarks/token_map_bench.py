"""One EAGLE-1 draft step with the full LM head vs a token map (issue 13, item 4), on the GPU.

Target: the random-weight Llama-3.1-8B shape (``random:llama3-8b``, 128,256-token vocabulary,
bf16); draft: a random EAGLE-1 head for it (fc + one decoder layer, the target's LM head). For
each batch size, times

* ``step``: one DRAFT_DECODE forward of the head with its argmax and id mapping, as the engine
  runs it: a replay of the draft chain graph (S = 2, so the chain is one step; CUDA events,
  median of ``--iters``);
* ``lm_head``: the head's LM head alone over the batch's features (eager, events);

with the full vocabulary and with a ``--map-size`` token map (default 32,768 ids; random ids:
which ids are kept does not change the cost). Prints a table and writes JSON to ``--out``.

    python benchmarks/token_map_bench.py --out benchmarks/results/DATE-h100-token-map/token_map.json

``--tiny`` runs a tiny shape on the CPU (emulated graphs, fp32) in well under a minute, to check
the script itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from graph_phases import fake_requests  # noqa: E402

from updraft.bench.models import random_model
from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.models.loader import LoadedModel
from updraft.spec.token_map import save_token_map
from updraft.train.heads import new_head, save_head


def median_ms(fn: Callable[[], Any], iters: int, device: torch.device) -> float:
    """Median milliseconds of ``fn()`` (3 warm-ups): CUDA events on the GPU, wall time on CPU."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def measure(loaded: LoadedModel, head: Path, token_map: Path | None, sizes: list[int], context: int, iters: int,
            device: torch.device, dtype: str) -> dict[str, dict[str, float]]:
    spec = SpeculativeConfig(method="eagle", draft_model=str(head), num_steps=2, adaptive=False,
                             token_map=str(token_map) if token_map else None)
    cfg = EngineConfig(model="random", device=device.type, dtype=dtype, progress=False, disable_fused_iteration=True,
                       graph_emulate=device.type == "cpu", cuda_graph_bs=sizes, max_running_requests=max(sizes),
                       max_total_tokens=max(sizes) * (context + 16) + 1024, speculative=spec)
    engine = Engine(cfg, loaded=loaded)
    prop = engine.spec.proposer  # type: ignore[union-attr]
    assert prop.chain is not None, engine.graph_log
    out: dict[str, dict[str, float]] = {}
    for bs in sizes:
        reqs = fake_requests(engine, bs, context)  # parked mid-decode at context tokens
        rows = torch.tensor([r.row for r in reqs], device=device)
        first, hidden = prop.next_token[rows], prop.next_hidden[rows]
        base = [r.seq_len - 1 for r in reqs]
        feat = hidden.clone()
        out[str(bs)] = {
            "step_ms": median_ms(lambda: prop.chain.replay(first, hidden, [r.row for r in reqs], base), iters, device),
            "lm_head_ms": median_ms(lambda: prop.runner.model.logits_from_feature(feat), iters, device),
        }
        for r in reqs:
            engine.allocator.free(r.row)  # type: ignore[arg-type]
            engine.req_pool.free(r.row)  # type: ignore[arg-type]
    loaded.model.aux_layers = ()
    del engine
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def report(res: dict[str, Any]) -> str:
    lines = [f"{res['device']}, torch {res['torch']}, target {res['target']} (vocab {res['vocab']}), "
             f"token map {res['map_size']} ids, context {res['context']}", "",
             "| bs | draft step, full vocab | draft step, token map | speed-up | LM head full | LM head map |",
             "|---|---|---|---|---|---|"]
    for bs, full in res["full"].items():
        m = res["map"][bs]
        lines.append(f"| {bs} | {full['step_ms']:.3f} ms | {m['step_ms']:.3f} ms | {full['step_ms'] / m['step_ms']:.2f}x "
                     f"| {full['lm_head_ms']:.3f} ms | {m['lm_head_ms']:.3f} ms |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny shape on the CPU (checks the script)")
    ap.add_argument("--map-size", type=int, default=None, help="token map size (default 32768; --tiny: vocab / 4)")
    ap.add_argument("--batch-sizes", default="1,8,32", help="comma-separated (default 1,8,32; --tiny: 1,4)")
    ap.add_argument("--context", type=int, default=None, help="tokens per request (default 1024; --tiny: 32)")
    ap.add_argument("--iters", type=int, default=None, help="timed runs per measurement (default 50; --tiny: 5)")
    ap.add_argument("--out", default=None, help="JSON results file")
    args = ap.parse_args()
    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    name = "random:tiny" if args.tiny else "random:llama3-8b"
    sizes = [1, 4] if args.tiny and args.batch_sizes == "1,8,32" else [int(b) for b in args.batch_sizes.split(",")]
    context = args.context or (32 if args.tiny else 1024)
    iters = args.iters or (5 if args.tiny else 50)
    loaded = random_model(name, dtype, device)
    vocab = loaded.config.vocab_size
    map_size = args.map_size or (vocab // 4 if args.tiny else 32768)
    if not 0 < map_size <= vocab:
        raise SystemExit(f"error: --map-size={map_size} must be in 1..{vocab}")
    res: dict[str, Any] = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__,
                           "target": name, "vocab": vocab, "map_size": map_size, "context": context, "iters": iters}
    with tempfile.TemporaryDirectory() as tmp:
        head, hcfg = new_head("eagle", loaded.model, seed=0, device=device)
        folder = save_head(head, hcfg, Path(tmp) / "head", dtype=dtype)
        del head
        ids = torch.randperm(vocab, generator=torch.Generator().manual_seed(0))[:map_size].sort().values
        token_map = save_token_map(ids, Path(tmp) / "map.pt")
        d = "float32" if args.tiny else "bfloat16"
        res["full"] = measure(loaded, folder, None, sizes, context, iters, device, d)
        res["map"] = measure(loaded, folder, token_map, sizes, context, iters, device, d)
    print(report(res))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()

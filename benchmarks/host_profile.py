"""Where the host's time goes in steady-state decoding on a GPU (issue 12: host time per
speculative iteration at bs 1).

Runs ``--bs`` requests of the given model (with a draft head, or plain) through ``Engine.step``
until every request decodes, then profiles ``--steps`` steps with cProfile. On a GPU the host
also blocks inside CUDA calls (a pageable copy, ``tolist`` of a device tensor, an event wait):
those show as the time of the calling builtin, so the table names them. Prints the top
functions by own time and by cumulative time, the wall time per step and the time spent
waiting for results, first timed without the profiler (its overhead is host time too), then
the synchronizing CUDA calls of as many more steps by the line that made them (``sync_sites``);
``--out`` writes the same as JSON.

    python benchmarks/host_profile.py --model PATH.gguf --head builtin:smollm2 --bs 1 --out host.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
import warnings
from collections import Counter
from pathlib import Path

import torch

from updraft.bench.models import is_random, random_model
from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.sampling_params import SamplingParams


def profile(eng: Engine, bs: int, steps: int, detokenize: bool) -> dict[str, object]:
    params = SamplingParams(temperature=0, max_tokens=steps * 24 + 64, ignore_eos=True)
    reqs = [eng.add_request([1 + (7 * i + j) % 500 for j in range(40 + i)], params, detokenize=detokenize) for i in range(bs)]
    while any(not r.output_ids for r in reqs):
        eng.step()
    for _ in range(10):
        eng.step()
    if eng.device.type == "cuda":
        torch.cuda.synchronize()
    drv = eng.driver

    def timed(prof: cProfile.Profile | None) -> tuple[float, float]:
        w0 = drv.wait_s if drv is not None else 0.0
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        for _ in range(steps):
            eng.step()
        if prof is not None:
            prof.disable()
        return time.perf_counter() - t0, (drv.wait_s - w0) if drv is not None else 0.0

    bare_wall, bare_wait = timed(None)  # the profiler's own overhead is host time too: time without it first
    prof = cProfile.Profile()
    wall, waited = timed(prof)
    syncs = sync_sites(eng, steps)
    for r in reqs:
        eng.abort(r.request_id)
    while eng.has_unfinished():
        eng.step()
    tables = {}
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(28)
        tables[key] = buf.getvalue()
    return {"bs": bs, "steps": steps, "detokenize": detokenize,
            "wall_ms_per_step": bare_wall / steps * 1e3, "wait_ms_per_step": bare_wait / steps * 1e3,
            "host_ms_per_step": (bare_wall - bare_wait) / steps * 1e3,
            "profiled_host_ms_per_step": (wall - waited) / steps * 1e3,
            "profile_by_own_time": tables["tottime"], "profile_by_cumulative": tables["cumulative"],
            "sync_sites": syncs}


def sync_sites(eng: Engine, steps: int) -> dict[str, int]:
    """Synchronizing CUDA calls in ``steps`` more steps (``torch.cuda.set_sync_debug_mode``: a
    blocking copy, ``item``, a stream sync), counted by the Python line that made each; empty on
    a CPU. The iteration's own wait is an event's, which the mode does not report."""
    if eng.device.type != "cuda":
        return {}
    sites: Counter[str] = Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                eng.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        sites[f"{Path(w.filename).name}:{w.lineno}"] += 1
    return dict(sites.most_common())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="default", help="checkpoint, or random:<shape> (e.g. random:llama3-8b)")
    ap.add_argument("--head", default=None, help="draft head (folder or builtin:NAME); none: plain decoding")
    ap.add_argument("--method", default="eagle3")
    ap.add_argument("--num-steps", type=int, default=5)
    ap.add_argument("--context-vocab", type=int, default=0, help="SpeculativeConfig.context_vocab (EAGLE-3 heads; 0: off)")
    ap.add_argument("--bs", type=int, nargs="+", default=[1])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--detokenize", action="store_true", help="also with incremental text per step (default: ids only)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    spec = None
    if args.head:
        spec = SpeculativeConfig(method=args.method, draft_model=args.head, num_steps=args.num_steps, adaptive=False,
                                 context_vocab=args.context_vocab)
    cfg = EngineConfig(model=args.model, speculative=spec, progress=False, max_running_requests=max(args.bs))
    loaded = random_model(args.model, cfg.resolved_dtype(), cfg.resolved_device()) if is_random(args.model) else None
    eng = Engine(cfg, loaded)
    results = []
    for bs in args.bs:
        for detok in ([False, True] if args.detokenize else [False]):
            r = profile(eng, bs, args.steps, detok)
            print(f"bs {bs} text {'on' if detok else 'off'}: wall {r['wall_ms_per_step']:.3f} ms/step, waiting "
                  f"{r['wait_ms_per_step']:.3f}, host {r['host_ms_per_step']:.3f} (profiled: {r['profiled_host_ms_per_step']:.3f})")
            print(f"bs {bs} synchronizing calls in {args.steps} steps: {r['sync_sites'] or 'none'}")
            print(r["profile_by_own_time"])
            results.append(r)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

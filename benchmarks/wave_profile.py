"""Where a batch's wall time goes, step by step (issue 12: spec / plain at bs 32 and 64).

One wave of ``--num-prompts`` mt_bench prompts at ``--bs`` slots, ``--output-len`` tokens each
(the shape of ``spec_iteration.py``'s speed runs), for plain decoding and each speculative
variant in one process: every ``Engine.step`` is timed on the host and tagged with what it
scheduled (a prefill of n requests, or a decode iteration of n), so the table splits the wall
time into prefill steps, full-batch decoding and the tail (decode steps with fewer requests than
the batch held at its widest), with the step counts. Then one prefill step of ``--prefill-reqs``
prompts per variant under the torch profiler: synchronised step time, CUDA kernels, the
costliest kernels and host operators. Prints both tables; ``--out`` writes JSON.

    python benchmarks/wave_profile.py --smollm PATH.gguf --head builtin:smollm2 --bs 64 --out wave.json
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import json
import pstats
import time
from pathlib import Path
from typing import Any

import torch

from updraft.batch import ForwardMode
from updraft.bench.models import is_random, random_model
from updraft.bench.offline import make_prompts, run_one
from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.provenance import git_commit
from updraft.sampling_params import SamplingParams


@dataclasses.dataclass
class StepRecord:
    seconds: float
    mode: str  # "prefill", "decode" or "idle"
    size: int  # requests scheduled


def timeline(eng: Engine, prompts: list[list[int]], params: SamplingParams, bs: int) -> list[StepRecord]:
    """Run ``prompts`` at ``bs`` slots, recording every step."""
    eng.scheduler.max_running = bs
    sched = eng.scheduler
    seen: list[tuple[str, int]] = []
    original = sched.schedule

    def tagged():  # noqa: ANN202
        b = original()
        seen.append(("idle", 0) if b is None else ("prefill" if b.mode == ForwardMode.EXTEND else "decode", len(b.reqs)))
        return b

    sched.schedule = tagged  # type: ignore[method-assign]
    reqs = [eng.add_request(p, params, stream_text=False) for p in prompts]
    out: list[StepRecord] = []
    try:
        while eng.has_unfinished():
            t0 = time.perf_counter()
            eng.step()
            dt = time.perf_counter() - t0
            mode, size = seen[-1] if seen else ("idle", 0)
            out.append(StepRecord(dt, mode, size))
            seen.clear()
    finally:
        sched.schedule = original  # type: ignore[method-assign]
    _sync(eng)
    for r in reqs:
        eng.release_finished(r.request_id)
    return out


def summarise(steps: list[StepRecord]) -> dict[str, Any]:
    decode = [s for s in steps if s.mode == "decode"]
    widest = max((s.size for s in decode), default=0)
    full = [s for s in decode if s.size == widest]
    tail = [s for s in decode if s.size < widest]
    first_decode = next((i for i, s in enumerate(steps) if s.mode == "decode"), len(steps))
    return {
        "wall_s": sum(s.seconds for s in steps),
        "prefill_s": sum(s.seconds for s in steps if s.mode == "prefill"),
        "prefill_steps": sum(1 for s in steps if s.mode == "prefill"),
        "before_first_decode_s": sum(s.seconds for s in steps[:first_decode]),
        "full_batch_s": sum(s.seconds for s in full),
        "full_batch_steps": len(full),
        "tail_s": sum(s.seconds for s in tail),
        "tail_steps": len(tail),
        "idle_s": sum(s.seconds for s in steps if s.mode == "idle"),
        "widest": widest,
    }


def _sync(eng: Engine) -> None:
    if eng.device.type == "cuda":
        torch.cuda.synchronize()


def profile_prefill(eng: Engine, prompts: list[list[int]], top: int = 12) -> dict[str, Any]:
    """One prefill step of ``prompts`` (all admitted together), synchronised, then profiled."""
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    eng.scheduler.max_running = max(len(prompts), 1)

    def once(prof: torch.profiler.profile | None) -> float:
        reqs = [eng.add_request(p, params, stream_text=False) for p in prompts]
        _sync(eng)
        t0 = time.perf_counter()
        if prof is None:
            eng.step()
        else:
            with prof:
                eng.step()
        _sync(eng)
        dt = time.perf_counter() - t0
        while eng.has_unfinished():
            eng.step()
        for r in reqs:
            eng.release_finished(r.request_id)
        return dt * 1e3

    times = [once(None) for _ in range(4)][1:]
    cprof = cProfile.Profile()
    reqs = [eng.add_request(p, params, stream_text=False) for p in prompts]
    _sync(eng)
    cprof.enable()
    eng.step()
    _sync(eng)
    cprof.disable()
    while eng.has_unfinished():
        eng.step()
    for r in reqs:
        eng.release_finished(r.request_id)
    stats = pstats.Stats(cprof)
    rows = [(f"{Path(k[0]).name}:{k[1]}({k[2]})", v[1], round(v[2] * 1e3, 3), round(v[3] * 1e3, 3)) for k, v in stats.stats.items()]  # type: ignore[attr-defined]
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    prof = torch.profiler.profile(activities=acts)
    once(prof)
    ev = prof.key_averages()
    cuda = [e for e in ev if e.device_type == torch.autograd.DeviceType.CUDA]
    cpu = [e for e in ev if e.device_type == torch.autograd.DeviceType.CPU]
    return {
        "step_ms": sorted(times)[len(times) // 2],
        "cuda_kernels": sum(e.count for e in cuda),
        "gpu_busy_ms": sum(e.self_device_time_total for e in cuda) / 1e3,
        "top_kernels": [(e.key[:80], e.count, round(e.self_device_time_total / 1e3, 3))
                        for e in sorted(cuda, key=lambda e: -e.self_device_time_total)[:top]],
        "python_by_own_ms": sorted(rows, key=lambda r: -r[2])[:top * 2],
        "python_by_cumulative_ms": sorted(rows, key=lambda r: -r[3])[:top * 3],
        "top_host_ops": [(e.key[:80], e.count, round(e.self_cpu_time_total / 1e3, 3))
                         for e in sorted(cpu, key=lambda e: -e.self_cpu_time_total)[:top]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smollm", required=True, help="the target (GGUF path, HF folder, default)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prompts", default="mt_bench")
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--bs", type=int, default=64)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--prefill-reqs", type=int, default=25)
    ap.add_argument("--prefill-only", action="store_true", help="skip the wave; profile the prefill step only")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    base = EngineConfig(model=args.smollm, device=args.device, dtype="bfloat16" if args.device == "cuda" else "float32",
                        graph_emulate=args.device != "cuda", progress=False,
                        max_running_requests=max(args.bs, args.prefill_reqs), max_total_tokens=200_000)
    eagle = SpeculativeConfig(method="eagle3", draft_model=args.head, num_steps=5)
    variants = [("plain", base), ("eagle_adaptive", dataclasses.replace(base, speculative=eagle)),
                ("eagle_s5", dataclasses.replace(base, speculative=dataclasses.replace(eagle, adaptive=False)))]
    greedy = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    res: dict[str, Any] = {"commit": git_commit(), "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "args": vars(args) | {"out": str(args.out)}}
    prompts: list[list[int]] = []
    for name, cfg in variants:
        loaded = random_model(cfg.model, cfg.resolved_dtype(), cfg.resolved_device()) if is_random(cfg.model) else None
        eng = Engine(cfg, loaded)
        prompts = prompts or make_prompts(eng, args.prompts, max(args.num_prompts, args.prefill_reqs), 0)
        ps = prompts[: args.num_prompts]
        run_one(eng, ps[: args.bs], dataclasses.replace(greedy, max_tokens=24), args.bs)  # warm-up / captures
        steps = [] if args.prefill_only else timeline(eng, ps, greedy, args.bs)
        summary = summarise(steps)
        summary["tok_s"] = len(ps) * args.output_len / summary["wall_s"] if steps else 0.0
        summary["decode_sizes"] = [s.size for s in steps if s.mode == "decode"]
        summary["step_ms"] = [round(s.seconds * 1e3, 3) for s in steps]
        summary["prefill"] = profile_prefill(eng, prompts[: args.prefill_reqs])
        res[name] = summary
        p = summary["prefill"]
        print(f"{name:15s} {summary['tok_s']:9.0f} tok/s  wall {summary['wall_s'] * 1e3:7.1f} ms = prefill "
              f"{summary['prefill_s'] * 1e3:6.1f} ({summary['prefill_steps']}) + full {summary['full_batch_s'] * 1e3:6.1f} "
              f"({summary['full_batch_steps']}) + tail {summary['tail_s'] * 1e3:6.1f} ({summary['tail_steps']}) + idle "
              f"{summary['idle_s'] * 1e3:5.1f}; one {args.prefill_reqs}-request prefill {p['step_ms']:.2f} ms, "
              f"{p['cuda_kernels']} kernels, GPU busy {p['gpu_busy_ms']:.2f} ms", flush=True)
        for k in p["top_kernels"][:6]:
            print(f"    kernel {k}")
        for k in p["top_host_ops"][:6]:
            print(f"    host   {k}")
        for k in p["python_by_own_ms"][:14]:
            print(f"    python {k}")
        del eng
        gc.collect()
        torch.cuda.empty_cache()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

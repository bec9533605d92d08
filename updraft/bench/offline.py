"""``updraft bench``: offline throughput/latency with and without speculation, side by side.

For each configuration (the engine flags as given, and the same without speculation unless
``--no-baseline``) and each batch size, the same prompts run through the engine with
``max_running_requests = batch size``; reported: output tokens/s, TTFT and TPOT percentiles,
per-phase time (prefill, draft, verify, accept, extend, sample, schedule, and the rest of the
step as CPU overhead), graph hit rate, acceptance length (counting the bonus token) with the
per-position acceptance and the accept-length histogram, and at batch 1 the achieved memory
bandwidth (weights + KV bytes read per decode step / step time) as a fraction of --peak-bw.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from updraft.bench.models import is_random, random_model
from updraft.config import EngineConfig
from updraft.engine.engine import Engine
from updraft.sampling_params import SamplingParams
from updraft.spec.stats import SpecStats


def percentiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan")}
    s = sorted(xs)

    def q(p: float) -> float:
        return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]

    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99)}


def accept_histogram(stats: SpecStats, num_steps: int) -> list[int]:
    """Verify steps per accept length 1..S+1 (from the cumulative per-position counts)."""
    pos = list(stats.accepted_per_pos) + [0] * (num_steps - len(stats.accepted_per_pos))
    at_least = [stats.num_drafts] + pos  # steps with accept length >= k + 1
    return [at_least[k] - (at_least[k + 1] if k + 1 < len(at_least) else 0) for k in range(num_steps + 1)]


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def make_prompts(engine: Engine, source: str, n: int, input_len: int, seed: int = 0) -> list[list[int]]:
    if source == "random":
        rng = random.Random(seed)
        vocab = engine.model_config.vocab_size
        return [[rng.randrange(vocab) for _ in range(input_len)] for _ in range(n)]
    from updraft.bench.prompts import load_prompts

    texts = load_prompts(source, n)
    return [engine.tokenizer.encode_chat([{"role": "user", "content": t}]) for t in texts]


def run_one(engine: Engine, prompts: list[list[int]], params: SamplingParams, bs: int) -> dict[str, Any]:
    """Run ``prompts`` with at most ``bs`` in flight; return the measurements."""
    eng = engine
    eng.scheduler.max_running = bs
    eng.timer.reset()
    eng.runner.path_counts.clear()
    chosen0 = Counter(eng.driver.adaptive.chosen) if eng.driver is not None else Counter()
    launches0 = eng.driver.launches if eng.driver is not None else 0
    drains0 = eng.driver.drains if eng.driver is not None else 0
    reqs = []
    t0 = time.perf_counter()
    for p in prompts:
        reqs.append(eng.add_request(p, params, stream_text=False))
    while eng.has_unfinished():
        eng.step()
    wall = time.perf_counter() - t0
    out_tokens = sum(len(r.output_ids) for r in reqs)
    ttft = [r.first_token_time - r.arrival_time for r in reqs if r.first_token_time]
    tpot = [
        (r.finish_time - r.first_token_time) / (len(r.output_ids) - 1)
        for r in reqs
        if r.finish_time and r.first_token_time and len(r.output_ids) > 1
    ]
    spec = SpecStats()
    for r in reqs:
        spec.merge(r.spec)
    outputs = [list(r.output_ids) for r in reqs]
    for r in reqs:
        eng.release_finished(r.request_id)
    phases = eng.timer.as_dict()
    step_total = phases.get("step", {}).get("total_s", 0.0)
    inner = sum(v["total_s"] for k, v in phases.items() if k in ("prefill", "decode", "draft", "verify", "accept", "extend", "sample", "schedule", "draft_prefill", "sync"))
    res: dict[str, Any] = {
        "batch_size": bs,
        "requests": len(reqs),
        "output_tokens": out_tokens,
        "wall_s": wall,
        "output_tok_s": out_tokens / wall,
        "ttft_s": percentiles(ttft),
        "tpot_s": percentiles(tpot),
        "phases": phases,
        "cpu_overhead_s": max(0.0, step_total - inner),
        "graph_hit_rate": eng.runner.graph_hit_rate(eng.driver.launches - launches0 if eng.driver else 0),
        "paths": dict(eng.runner.path_counts) | ({"fused graph": eng.driver.launches - launches0} if eng.driver else {}),
        "outputs": outputs,
    }
    if eng.driver is not None:
        # chosen S and launches of this run only (the policy's estimates carry over between runs)
        chosen = eng.driver.adaptive.chosen - chosen0
        res["fused"] = eng.driver.adaptive.snapshot() | {"chosen_s": dict(sorted(chosen.items())),
                                                         "launches": eng.driver.launches - launches0,
                                                         "drains": eng.driver.drains - drains0}
    if spec.num_drafts and eng.spec is not None:
        res["spec"] = spec.as_dict() | {
            "per_position_rate": spec.per_position_rate(),
            "accept_length_histogram": accept_histogram(spec, eng.spec.num_steps),
        }
    return res


def decode_bandwidth(engine: Engine, context: int, peak_bw: float, iters: int = 30) -> dict[str, Any]:
    """Batch-1 decode step: bytes read (weights + KV) / step time, as a fraction of ``peak_bw``;
    ``path``: how the step ran ("DECODE graph", or "DECODE eager: <why>": a speculative engine
    captures its fused iteration, not a lone DECODE step, so its figure is an eager step's)."""
    from updraft.batch import ForwardMode

    eng = engine
    before = Counter(eng.runner.path_counts)
    row = eng.req_pool.alloc()
    assert row is not None and eng.allocator.ensure(row, context + 1)
    try:
        def step() -> None:
            b = eng.runner.make_batch(ForwardMode.DECODE, [1], [row], [context + 1], [1], stride=1)
            eng.runner.forward(b)

        for _ in range(5):
            step()
        if eng.device.type == "cuda":
            torch.cuda.synchronize(eng.device)
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        if eng.device.type == "cuda":
            torch.cuda.synchronize(eng.device)
        dt = (time.perf_counter() - t0) / iters
    finally:
        eng.allocator.free(row)
        eng.req_pool.free(row)
    kv = context * eng.model_config.kv_bytes_per_token(eng.dtype)
    total = weight_bytes(eng.model) + kv
    ran = Counter(eng.runner.path_counts) - before
    return {"step_ms": dt * 1000, "bytes_per_step": total, "achieved_bw": total / dt, "fraction_of_peak": total / dt / peak_bw,
            "path": ran.most_common(1)[0][0] if ran else "unknown"}


def cmd_bench(args: argparse.Namespace, engine_cfg: EngineConfig) -> int:
    sizes = [int(x) for x in str(args.batch_sizes).split(",") if x]
    cfgs = [("spec" if engine_cfg.speculative else "plain", engine_cfg)]
    if engine_cfg.speculative is not None and not args.no_baseline:
        cfgs.insert(0, ("plain", dataclasses.replace(engine_cfg, speculative=None)))
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.output_len, ignore_eos=True)
    results: dict[str, Any] = {"runs": {}}
    loaded = None
    if is_random(engine_cfg.model):
        loaded = random_model(engine_cfg.model, engine_cfg.resolved_dtype(), engine_cfg.resolved_device())
    for name, cfg in cfgs:
        cfg = dataclasses.replace(cfg, max_running_requests=max(max(sizes), cfg.max_running_requests))
        engine = Engine(cfg, loaded=loaded)
        engine.timer.enabled = True
        prompts = make_prompts(engine, args.prompts, args.num_prompts, args.input_len)
        run_one(engine, prompts[:2], dataclasses.replace(params, max_tokens=8), 2)  # warm-up
        results["runs"][name] = {str(bs): run_one(engine, prompts, params, bs) for bs in sizes}
        ctx = min(args.bw_context, engine.max_model_len - 2)
        results["runs"][name]["bandwidth_bs1"] = decode_bandwidth(engine, ctx, args.peak_bw) | {"context": ctx}
        results.setdefault("meta", _meta(engine, args))
        if args.peer == "transformers" and name == "plain":
            results["peer"] = run_peers(engine, loaded, prompts, args)
        del engine
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    print_report(results, sizes)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        slim = json.loads(json.dumps(results, default=str))
        for runs in slim["runs"].values():
            for r in runs.values():
                if isinstance(r, dict):
                    r.pop("outputs", None)
        (out / "bench.json").write_text(json.dumps(slim, indent=1))
        _plots(results, sizes, out)
        print(f"wrote {out}")
    return 0


def run_peers(engine: Engine, loaded: Any, prompts: list[list[int]], args: argparse.Namespace) -> dict[str, Any]:
    """transformers on the same model and prompts; greedy agreement with our plain outputs."""
    from updraft.bench.peers import agreement, hf_from_ours, load_hf, run_peer
    from updraft.models.resolve import resolve_model

    if loaded is not None:
        hf = hf_from_ours(engine.model)
    else:
        hf = load_hf(resolve_model(engine.config.model), engine.dtype, engine.device)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.output_len, ignore_eos=True)
    ours = {bs: run_one(engine, prompts, params, bs) for bs in (1, 8)}
    out: dict[str, Any] = {}
    for mode in str(args.peer_modes).split(","):
        for bs in (1, 8):
            r = run_peer(hf, prompts, args.output_len, bs, mode)
            if "outputs" in r:
                r["agreement_with_updraft"] = agreement(ours[bs]["outputs"], r.pop("outputs"))
                r["updraft_output_tok_s"] = ours[bs]["output_tok_s"]
            out[f"{mode}_bs{bs}"] = r
            print(f"transformers {mode} bs {bs}: " + (f"{r['output_tok_s']:.1f} tok/s, greedy agreement {r['agreement_with_updraft']}" if "output_tok_s" in r else r["skipped"]), flush=True)
    del hf
    return out


def _meta(engine: Engine, args: argparse.Namespace) -> dict[str, Any]:
    from updraft.provenance import git_commit

    commit = git_commit()
    dev = torch.cuda.get_device_name() if engine.device.type == "cuda" else "cpu"
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "device": dev,
        "torch": torch.__version__,
        "model": engine.config.model,
        "dtype": str(engine.dtype).removeprefix("torch."),
        "attention": engine.backend_name,
        "graphs": engine.graph_log,
        "args": vars(args) | {"func": None},
    }


def print_report(results: dict[str, Any], sizes: list[int]) -> None:
    print("\n| config | bs | out tok/s | TTFT p50 ms | TPOT p50/p90/p99 ms | accept len | graph hits |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, runs in results["runs"].items():
        for bs in sizes:
            r = runs[str(bs)]
            tp = r["tpot_s"]
            acc = r.get("spec", {}).get("mean_accept_length", 1.0)
            print(
                f"| {name} | {bs} | {r['output_tok_s']:.1f} | {1000 * r['ttft_s']['p50']:.1f} | "
                f"{1000 * tp['p50']:.2f}/{1000 * tp['p90']:.2f}/{1000 * tp['p99']:.2f} | {acc:.2f} | {100 * r['graph_hit_rate']:.0f}% |"
            )
    names = list(results["runs"])
    if len(names) == 2:
        for bs in sizes:
            a, b = (results["runs"][n][str(bs)]["output_tok_s"] for n in names)
            print(f"speculation speedup at bs {bs}: {b / a:.2f}x")
    for name, runs in results["runs"].items():
        for bs in sizes:
            ph = runs[str(bs)]["phases"]
            parts = ", ".join(f"{k} {v['total_s']:.3f}s" for k, v in sorted(ph.items()) if k != "step")
            print(f"{name} bs {bs} phases: {parts}, cpu overhead {runs[str(bs)]['cpu_overhead_s']:.3f}s")
            spec = runs[str(bs)].get("spec")
            if spec:
                print(f"  accept per position {[round(x, 3) for x in spec['per_position_rate']]}, histogram of accept lengths {spec['accept_length_histogram']}")
        bw = runs["bandwidth_bs1"]
        print(f"{name}: bs 1 decode step {bw['step_ms']:.3f} ms ({bw['path']}), {bw['achieved_bw'] / 1e9:.1f} GB/s = "
              f"{100 * bw['fraction_of_peak']:.1f}% of peak")


def _plots(results: dict[str, Any], sizes: list[int], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plots")
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, runs in results["runs"].items():
        ax.plot(sizes, [runs[str(b)]["output_tok_s"] for b in sizes], marker="o", label=name)
    ax.set_xlabel("batch size")
    ax.set_ylabel("output tokens/s")
    ax.set_xscale("log", base=2)
    ax.legend()
    ax.set_title("throughput vs batch size")
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=120)
    plt.close(fig)
    for name, runs in results["runs"].items():
        spec = runs[str(sizes[0])].get("spec")
        if not spec:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        rates = spec["per_position_rate"]
        ax.bar(range(1, len(rates) + 1), rates)
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate")
        ax.set_ylim(0, 1)
        ax.set_title(f"acceptance per position ({name}, mean accept length {spec['mean_accept_length']:.2f})")
        fig.tight_layout()
        fig.savefig(out / f"acceptance_{name}.png", dpi=120)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels, bottoms = [], None
    keys = sorted({k for runs in results["runs"].values() for b in sizes for k in runs[str(b)]["phases"] if k != "step"})
    for k in keys:
        vals = [results["runs"][n][str(b)]["phases"].get(k, {}).get("total_s", 0.0) for n in results["runs"] for b in sizes]
        labels = [f"{n}\nbs{b}" for n in results["runs"] for b in sizes]
        ax.bar(labels, vals, bottom=bottoms, label=k)
        bottoms = vals if bottoms is None else [x + y for x, y in zip(bottoms, vals)]
    ax.set_ylabel("seconds")
    ax.set_title("step-time breakdown")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "phases.png", dpi=120)
    plt.close(fig)

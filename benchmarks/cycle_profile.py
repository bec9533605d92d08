"""Where a fused iteration's device time goes (GPU): kernels per replay, GPU-busy time and the
kernels that cost most, for the plain step (S = 0) and the S = 5 iteration, greedy and sampled
(T = 0.7, top-p 0.9), from the profiler over graph replays (CUPTI traces the kernels of a graph
launch). Also the difference sampled minus greedy per kernel name: what the sampled cycle pays.

    python benchmarks/cycle_profile.py --smollm SmolLM2-135M-Instruct.Q4_1.gguf --out OUT
    python benchmarks/cycle_profile.py --eight-b --sizes 1 --out OUT   # random Llama-3.1-8B shape,
                                                # random EAGLE-3 head with a 32k draft vocabulary
    python benchmarks/cycle_profile.py --random-smollm --out OUT       # SmolLM2's shape, random weights

With ``UPDRAFT_PDL=0`` each kernel's time is its own (under PDL a kernel's time includes its wait
for the one before it, so only differences between variants read true).

Prints a short table per variant; writes ``cycle_profile.json`` to --out, with each variant's
kernels of one replay in launch order (``sequence``: name, start offset, us), which tells the draft steps' launches
from the verify's where both run the same kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from spec_iteration import (  # noqa: E402
    LLAMA8B,
    add_cost_args,
    args_text,
    head_method,
    park,
    random_llama,
    smollm_engine_config,
    write_random_eagle3,
)

from updraft.bench.models import random_model  # noqa: E402
from updraft.config import SpeculativeConfig  # noqa: E402
from updraft.engine.engine import Engine  # noqa: E402
from updraft.models.config import ModelConfig  # noqa: E402
from updraft.provenance import git_commit  # noqa: E402

#: Kernel-name fragments -> group (first match wins; names are lowercased).
GROUPS = (("gemm", ("gemm", "cutlass", "nvjet", "sm90_xmma", "splitk")), ("attention", ("attn", "decode", "extend", "merge")),
          ("sampling", ("sample", "accept", "choose", "uniform", "filter", "rejection")), ("topk/sort", ("topk", "sort", "radix")),
          ("norm", ("rms", "norm")), ("reduce/argmax", ("reduce", "argmax", "max_")))


def group(name: str) -> str:
    low = name.lower()
    return next((g for g, keys in GROUPS if any(k in low for k in keys)), "other")


def profile_variant(eng: Engine, bs: int, steps: int, sampled: bool, context: int, iters: int,
                    text: list[int] | None = None) -> dict[str, Any]:
    """Kernels of ``iters`` replays of the fused iteration (``steps`` drafts) at batch ``bs``
    (``text``: the requests' context, ``fake_requests``)."""
    reqs = park(eng, bs, context, text, sampled)
    drv = eng.driver
    assert drv is not None
    drv.fused.graph_for(steps, sampled, bs)
    secs = []
    for _ in range(5):  # warm-up outside the trace
        drv.admit(reqs)
        drv.fused.launch(reqs, steps, sampled).wait()
    if eng.device.type == "cuda":
        torch.cuda.synchronize()
    acts = [ProfilerActivity.CUDA] if eng.device.type == "cuda" else [ProfilerActivity.CPU]  # CPU: a smoke run only
    # ``admit`` resets the rows' device state before each replay (so every replay sees the same
    # lengths); its indexed writes are kernels of the benchmark, not of the step: counted here
    # alone, then left out of each replay's block below.
    with profile(activities=acts) as solo:
        drv.admit(reqs)
        if eng.device.type == "cuda":
            torch.cuda.synchronize()
    admit_k = len(_kernels(solo))
    with profile(activities=acts) as prof:
        for _ in range(iters):
            drv.admit(reqs)
            inf = drv.fused.launch(reqs, steps, sampled)
            inf.wait()
            secs.append(inf.seconds() * 1e3)
    for r in reqs:
        eng.scheduler.release(r)
    per_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # name -> [us, count] per replay
    kernels = sorted(_kernels(prof), key=lambda ev: ev.time_range.start)
    per = len(kernels) // max(iters, 1)
    if admit_k and per * iters == len(kernels) and admit_k < per:
        kernels = [ev for i, ev in enumerate(kernels) if i % per >= admit_k]  # each block: admit, then the replay
        per -= admit_k
    elif admit_k:
        print(f"   (admit's {admit_k} kernels not separable from {len(kernels)} over {iters} replays: counted in)")
        admit_k = 0
    for ev in kernels:
        per_name[ev.name][0] += ev.device_time / iters
        per_name[ev.name][1] += 1 / iters
    # one replay's kernels in launch order (every replay runs the same graph): which phase each is,
    # its start after the replay's first kernel's and its time (us; under PDL a start shows when
    # a kernel began waiting, so phases are read from the starts of the kernels that open them)
    t0 = kernels[0].time_range.start if kernels else 0.0
    sequence = [[ev.name[:60], round(ev.time_range.start - t0, 2), round(ev.device_time, 2)] for ev in kernels[:per]]
    groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, (us, n) in per_name.items():
        groups[group(name)][0] += us
        groups[group(name)][1] += n
    busy = sum(us for us, _ in per_name.values())
    return {"replay_ms": statistics.median(secs), "busy_ms": busy / 1e3, "kernels": round(sum(n for _, n in per_name.values()), 1),
            "groups": {g: {"us": round(us, 1), "kernels": round(n, 1)} for g, (us, n) in sorted(groups.items(), key=lambda x: -x[1][0])},
            "top": [{"name": k[:90], "us": round(v[0], 1), "count": round(v[1], 1)}
                    for k, v in sorted(per_name.items(), key=lambda x: -x[1][0])[:25]],
            "all": {k[:120]: [round(v[0], 2), round(v[1], 2)] for k, v in per_name.items()},
            "sequence": sequence, "admit_kernels_left_out": admit_k}


def _kernels(prof: Any) -> list[Any]:
    """The device kernels a profile saw (copies and fills by the driver left out)."""
    return [ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA
            and "memcpy" not in ev.name.lower() and "memset" not in ev.name.lower()]


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kernel name, b minus a (us and count per replay), largest first."""
    names = set(a["all"]) | set(b["all"])
    rows = [{"name": n[:90], "us": round(b["all"].get(n, [0, 0])[0] - a["all"].get(n, [0, 0])[0], 1),
             "count": round(b["all"].get(n, [0, 0])[1] - a["all"].get(n, [0, 0])[1], 1)} for n in names]
    return sorted([r for r in rows if abs(r["us"]) >= 1 or r["count"]], key=lambda r: -abs(r["us"]))[:20]


def show(key: str, r: dict[str, Any]) -> None:
    print(f"== {key}: replay {r['replay_ms']:.3f} ms, GPU busy {r['busy_ms']:.3f} ms, {r['kernels']} kernels")
    print("   " + ", ".join(f"{g} {v['us']:.0f} us / {v['kernels']:.0f}" for g, v in r["groups"].items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cost_args(ap, "1,8", smollm_required=False)
    ap.add_argument("--eight-b", action="store_true", help="the random Llama-3.1-8B shape instead of SmolLM2")
    ap.add_argument("--random-smollm", action="store_true",
                    help="SmolLM2's shape with random weights (no GGUF needed) and --head; the KV stays unwritten")
    args = ap.parse_args()
    if not args.eight_b and not args.smollm and not args.random_smollm:
        ap.error("give --smollm GGUF, --random-smollm or --eight-b")
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        if args.eight_b:  # random weights: the requests' KV stays unwritten (no text to encode)
            cfg = ModelConfig(**LLAMA8B)
            head = str(write_random_eagle3(Path(tmp) / "e3", cfg, 32000))
            loaded = random_llama(cfg, torch.bfloat16)
            base = smollm_engine_config("random", sizes, args.context)
            spec = SpeculativeConfig(method="eagle3", draft_model=head, num_steps=5, adaptive=False)
        elif args.random_smollm:  # the cycle's kernels do not depend on the weights (S pinned)
            head, loaded = args.head, random_model("random:smollm2-135m", torch.bfloat16, "cuda")
            base = smollm_engine_config("random", sizes, args.context)
            spec = SpeculativeConfig(method=head_method(head), draft_model=head, num_steps=5, adaptive=False)
        else:
            head, loaded = args.head, None
            base = smollm_engine_config(args.smollm, sizes, args.context)
            spec = SpeculativeConfig(method=head_method(head), draft_model=head, num_steps=5, adaptive=False)
        plain = Engine(base, loaded=loaded)  # its S = 0 step is plain decoding (the speculative engine's also runs the draft)
        eng = Engine(dataclasses.replace(base, speculative=spec), loaded=loaded)
        text = None if args.eight_b or args.random_smollm else args_text(args, plain, sizes)
        out = profile_all(plain, eng, sizes, args.context, args.iters, text)
    out = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "model": "random Llama-3.1-8B shape" if args.eight_b else "random SmolLM2-135M shape" if args.random_smollm else "SmolLM2-135M", "head": "random EAGLE-3, 32k" if args.eight_b else args.head,
           "context": "unwritten KV" if text is None else "mt_bench text",
           "pdl": os.environ.get("UPDRAFT_PDL", "1")} | out
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cycle_profile.json").write_text(json.dumps(out, indent=1))


def profile_all(plain: Engine, eng: Engine, sizes: list[int], context: int, iters: int,
                text: list[int] | None) -> dict[str, Any]:
    """Plain, greedy S = 5 and sampled S = 5 per batch size, and their differences."""
    out: dict[str, Any] = {}
    for bs in sizes:
        res = {}
        for key, e, steps, sampled in (("plain", plain, 0, False), ("greedy_s5", eng, 5, False), ("sampled_s5", eng, 5, True)):
            res[key] = profile_variant(e, bs, steps, sampled, context, iters, text)
            show(f"bs {bs} {key}", res[key])
        res["sampled_minus_greedy"] = diff(res["greedy_s5"], res["sampled_s5"])
        res["greedy_minus_plain"] = diff(res["plain"], res["greedy_s5"])
        for k in ("sampled_minus_greedy", "greedy_minus_plain"):
            print(f"   {k}: " + "; ".join(f"{r['name'][:40]} {r['us']:+.0f} us ({r['count']:+.0f})" for r in res[k][:8]))
        out[f"bs{bs}"] = res
    return out


if __name__ == "__main__":
    main()

"""Where an arriving request's prefill step spends its time (GPU machine): host-side profile of
one eager prefill step (plain, and with the EAGLE draft's prefill), top operators by self CPU
time, with the CUDA kernel count; the answer to "why does an arrival cost ~30 ms" (issue 12).

    python benchmarks/prefill_profile.py --model PATH.gguf --out DIR
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from updraft.bench.offline import make_prompts
from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.sampling_params import SamplingParams


def profile_prefill(eng: Engine, prompt: list[int], top: int) -> dict[str, object]:
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)

    def prefill(prof: torch.profiler.profile | None = None) -> float:
        req = eng.add_request(prompt, params)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if prof is None:
            eng.step()
        else:
            with prof:
                eng.step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        while eng.has_unfinished():
            eng.step()
        eng.release_finished(req.request_id)
        return dt * 1e3

    times = [prefill() for _ in range(6)][1:]
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    prof = torch.profiler.profile(activities=acts, with_stack=False)
    prefill(prof)
    ka = prof.key_averages()
    cpu = sorted((e for e in ka if e.self_cpu_time_total > 0), key=lambda e: -e.self_cpu_time_total)
    rows = [{"op": e.key[:80], "calls": e.count, "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 3)} for e in cpu[:top]]
    kernels = sum(e.count for e in ka if e.device_type == torch.autograd.DeviceType.CUDA)
    gpu_ms = sum(e.self_device_time_total for e in ka if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3
    return {"prompt_tokens": len(prompt), "step_ms_median": sorted(times)[len(times) // 2], "cuda_kernels": kernels,
            "gpu_busy_ms": round(gpu_ms, 3), "self_cpu_ms_total": round(sum(e.self_cpu_time_total for e in cpu) / 1e3, 3),
            "top_ops": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    res: dict[str, object] = {}
    for name, spec in (("plain", None), ("eagle", SpeculativeConfig(method="eagle3", draft_model="builtin:smollm2", num_steps=5))):
        eng = Engine(EngineConfig(model=args.model, device="cuda", dtype="bfloat16", progress=False, speculative=spec))
        prompt = make_prompts(eng, "mt_bench", 2, 0)[1]
        r = profile_prefill(eng, prompt, args.top)
        res[name] = r
        print(f"== {name}: {json.dumps({k: v for k, v in r.items() if k != 'top_ops'})}")
        for row in r["top_ops"]:  # type: ignore[union-attr]
            print(f"   {row['self_cpu_ms']:8.3f} ms {row['calls']:5d}x  {row['op']}")
        del eng
        torch.cuda.empty_cache()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "prefill_profile.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

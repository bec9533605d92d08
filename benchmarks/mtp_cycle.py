"""The MTP cycle of a random DeepSeek shape in plain decode steps (issue 15: DeepSeek-V2-Lite,
S = 1 and 3; goal <= 1.3 plain steps at S = 1).

The random target (``random:deepseek-v2-lite`` by default) gets one random MTP module written as
a head folder in DeepSeek's layout (its config.json with ``num_nextn_predict_layers = 1`` and
``model.layers.{L}.*`` tensors), loaded by ``--speculative-algorithm MTP``. Per batch size: the
plain step (the fused plain iteration, one DECODE replay with the state on the device) and the
fused MTP iteration at each S, as device time from CUDA events, with requests parked at
``--context`` tokens; the cycle in plain steps. Prints a table; ``--out`` writes JSON.

    python benchmarks/mtp_cycle.py --model random:deepseek-v2-lite --sizes 1,8 --out mtp.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))
from cycle_profile import diff, profile_variant, show  # noqa: E402
from graph_phases import fake_requests  # noqa: E402
from spec_iteration import _free, fused_ms  # noqa: E402

from updraft.bench.models import SHAPES, random_model  # noqa: E402
from updraft.config import EngineConfig, SpeculativeConfig  # noqa: E402
from updraft.engine.engine import Engine  # noqa: E402
from updraft.models.deepseek_mtp import random_mtp_state  # noqa: E402
from updraft.provenance import git_commit  # noqa: E402


def write_mtp_folder(folder: Path, hf_config: dict[str, Any], loaded: Any, dtype: torch.dtype) -> Path:
    """A head folder holding one random MTP module of ``loaded``'s config, DeepSeek's layout."""
    cfg = loaded.config
    state = random_mtp_state(cfg, dtype, "cpu")[0]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(hf_config, num_nextn_predict_layers=1)))
    save_file({f"model.layers.{cfg.num_layers}.{n}": t.contiguous() for n, t in state.items()}, str(folder / "model.safetensors"))
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="random:deepseek-v2-lite")
    ap.add_argument("--sizes", default="1,8")
    ap.add_argument("--steps", default="1,3")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--profile", action="store_true",
                    help="also the kernels of the plain step and each cycle (cycle_profile.py's tables), bs 1")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    steps = [int(x) for x in args.steps.split(",")]
    dtype = torch.bfloat16
    loaded = random_model(args.model, dtype, "cuda")
    hf = SHAPES[args.model.removeprefix("random:")]["hf_config"]
    base = EngineConfig(model=args.model, device="cuda", dtype="bfloat16", progress=False, cuda_graph_bs=sizes,
                        max_running_requests=max(sizes), max_model_len=args.context + 256,
                        max_total_tokens=max(sizes) * (args.context + 64) + 4096)
    res: dict[str, Any] = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "model": args.model,
                           "context": args.context, "backend": None}
    plain = Engine(base, loaded=loaded)
    res["backend"] = plain.runner.backend_name
    for bs in sizes:
        reqs = fake_requests(plain, bs, args.context)
        res[f"plain_step_ms_bs{bs}"] = fused_ms(plain, reqs, args.iters)
        for r in reqs:
            plain.scheduler.release(r)
    if args.profile:
        res["profile_plain_bs1"] = profile_variant(plain, 1, 0, False, args.context, 5)
        show("bs 1 plain", res["profile_plain_bs1"])
    del plain
    _free()
    with tempfile.TemporaryDirectory() as tmp:
        head = write_mtp_folder(Path(tmp) / "mtp", hf, loaded, dtype)
        spec = SpeculativeConfig(method="mtp", draft_model=str(head), num_steps=max(steps), adaptive_steps=steps)
        eng = Engine(dataclasses.replace(base, speculative=spec), loaded=loaded)
        assert eng.driver is not None, eng.graph_log
        for bs in sizes:
            reqs = fake_requests(eng, bs, args.context)
            for s in steps:
                ms = fused_ms(eng, reqs, args.iters, steps=s)
                res[f"cycle_ms_s{s}_bs{bs}"] = ms
                res[f"cycle_steps_s{s}_bs{bs}"] = ms / res[f"plain_step_ms_bs{bs}"]
            for r in reqs:
                eng.scheduler.release(r)
        if args.profile:
            for s in steps:
                prof = res[f"profile_s{s}_bs1"] = profile_variant(eng, 1, s, False, args.context, 5)
                show(f"bs 1 MTP S = {s}", prof)
                res[f"profile_s{s}_minus_plain"] = d = diff(res["profile_plain_bs1"], prof)
                print("   minus plain: " + "; ".join(f"{r['name'][:40]} {r['us']:+.0f} us ({r['count']:+.0f})" for r in d[:10]))
        del eng
    print(f"{args.model} ({res['backend']}), context {args.context}")
    for bs in sizes:
        cells = "  ".join(f"S={s}: {res[f'cycle_ms_s{s}_bs{bs}']:.3f} ms = {res[f'cycle_steps_s{s}_bs{bs}']:.2f} steps" for s in steps)
        print(f"  bs {bs:3d}: plain step {res[f'plain_step_ms_bs{bs}']:.3f} ms  {cells}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

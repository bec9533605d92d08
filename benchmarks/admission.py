"""Admission in groups (``--admit-group``) against one prefill per freed slot, side by side.

More requests than slots (``--num-prompts`` through ``--bs`` slots, fixed output lengths, the
shape of ``spec_iteration.py``'s bs-32 run): plain decoding finishes a wave's requests in the
same step and prefills the next ones together; speculative requests finish at different steps,
so with ``admit_group = 1`` every freed slot costs a prefill step that pauses the whole batch.
Runs plain decoding and SmolLM2 + a draft head (adaptive S and S = 5) with each admit group in
one process; prints tokens/s, the ratios to plain with the same group, and the number of
prefill steps. ``--out`` writes JSON.

    python benchmarks/admission.py --model PATH.gguf --head builtin:smollm2 --bs 32 --out admission.json
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
from pathlib import Path
from typing import Any

import torch

from updraft.bench.offline import make_prompts, run_one
from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.sampling_params import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="default")
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--method", default="eagle3")
    ap.add_argument("--bs", type=int, default=32)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    greedy = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    spec = SpeculativeConfig(method=args.method, draft_model=args.head, num_steps=5)
    variants = {"plain": None, "eagle_adaptive": spec, "eagle_s5": dataclasses.replace(spec, adaptive=False)}
    res: dict[str, Any] = {"bs": args.bs, "num_prompts": args.num_prompts, "output_len": args.output_len}
    prompts: list[list[int]] = []
    for group in args.groups:
        for name, sp in variants.items():
            cfg = EngineConfig(model=args.model, progress=False, max_running_requests=args.bs, admit_group=group, speculative=sp)
            eng = Engine(cfg)
            prompts = prompts or make_prompts(eng, "mt_bench", args.num_prompts, 0)
            run_one(eng, prompts[: args.bs], dataclasses.replace(greedy, max_tokens=24), args.bs)  # warm-up
            before = eng.stats.prefill_steps
            r = run_one(eng, prompts, greedy, args.bs)
            r.pop("outputs", None)
            r["prefill_steps"] = eng.stats.prefill_steps - before
            key = f"{name}_group{group}"
            res[key] = r
            plain = res.get(f"plain_group{group}")
            ratio = r["output_tok_s"] / plain["output_tok_s"] if plain else 1.0
            print(f"{key:22s} {r['output_tok_s']:9.1f} tok/s  {ratio:5.2f}x plain  prefill steps {r['prefill_steps']:4d}  "
                  f"accept {r.get('spec', {}).get('mean_accept_length', '-')}", flush=True)
            del eng
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()

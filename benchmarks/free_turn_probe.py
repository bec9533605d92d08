"""Does a draft head accept on the answers to the target's own user turns as on mt_bench's, or as
on our templated prompts? (CPU probe behind prompt set v6, issue 13.)

    .venv/bin/python benchmarks/free_turn_probe.py --n 24 --max-tokens 192 --out DIR

The default target and head in fp32 on the CPU (S = 5 pinned, lookup assist off, greedy answers
8 at a time). ``2 n`` free user turns are sampled (an open user turn, T = 1, top-p 0.95, seeds
1000..), cleaned with ``clean_request`` (as it ran on 2026-12-03, before ``clean_user_turn``
existed), and the first ``n`` usable ones answered; then the first ``n`` mt_bench prompts
(read in place), ``n`` prompts of set v5 and the single-stage ones of ``n`` prompts of set v4
(their texts as the user turn). Prints and writes (``free_turn_probe.json``) each group's mean
accept length and per-position acceptance, with the free turns' texts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from updraft.bench.prompts import load_prompt_rows
from updraft.config import EngineConfig, SpeculativeConfig
from updraft.data.clean import clean_request
from updraft.data.prompts import build_prompts
from updraft.engine.engine import Engine
from updraft.engine.request import Request
from updraft.heads import resolve_draft_path
from updraft.models.loader import load_checkpoint
from updraft.models.resolve import resolve_model
from updraft.sampling_params import SamplingParams
from updraft.spec.stats import SpecStats


def run(eng: Engine, prompts: list[list[int]], params: list[SamplingParams]) -> list[Request]:
    reqs = [eng.add_request(p, q, detokenize=False) for p, q in zip(prompts, params, strict=True)]
    while eng.has_unfinished():
        eng.step()
    for r in reqs:
        eng.release_finished(r.request_id)
    return reqs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    loaded = load_checkpoint(resolve_model("default"), dtype=torch.float32, device=torch.device("cpu"), progress=False)
    spec = SpeculativeConfig(method="eagle3", draft_model=resolve_draft_path(args.head), num_steps=5, adaptive=False, ngram_assist=0)
    eng = Engine(EngineConfig(model=str(loaded.source), device="cpu", dtype="float32", progress=False, max_total_tokens=16384,
                              max_running_requests=8, speculative=spec), loaded=loaded)
    tok, t0, n = eng.tokenizer, time.time(), args.n
    free: list[str] = []
    for chunk in range(0, 2 * n, 8):
        params = [SamplingParams(temperature=1.0, top_p=0.95, max_tokens=160, seed=1000 + chunk + i) for i in range(8)]
        for r in run(eng, [tok.encode_open_user_turn()] * 8, params):
            text = clean_request(tok.decode(list(r.output_ids), skip_special_tokens=True))
            free += [text] if text else []
    print(f"stage1: {2 * n} sampled, {len(free)} usable, {time.time() - t0:.0f}s", flush=True)
    groups = {
        "free_turn": free[:n],
        "mt_bench": [r.text for r in load_prompt_rows("mt_bench", n)],
        "own_v5": [p.text for p in build_prompts(n, seed=777, prompt_set="v5")],
        "own_v4": [p.text for p in build_prompts(n, seed=778, prompt_set="v4") if p.fallback_request is None][:n],
    }
    res = {}
    greedy = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    for name, texts in groups.items():
        st = SpecStats()
        for k in range(0, len(texts), 8):
            ids = [tok.encode_chat([{"role": "user", "content": t}]) for t in texts[k:k + 8]]
            for r in run(eng, ids, [greedy] * len(ids)):
                st.merge(r.spec)
        res[name] = {"n": len(texts), "mean_accept_length": st.mean_accept_length, "per_position": st.per_position_rate()}
        print(name, len(texts), round(st.mean_accept_length, 3), [round(x, 3) for x in st.per_position_rate()],
              f"{time.time() - t0:.0f}s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "free_turn_probe.json").write_text(json.dumps({"results": res, "free_turns": free[:n]}, indent=1))


if __name__ == "__main__":
    main()

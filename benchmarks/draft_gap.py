"""Where a draft head's teacher-forced accuracy and the engine's acceptance part ways.

On held-out prompts of our own prompt set (never the evaluation sets), for a target and an
EAGLE-3 / EAGLE head:

1. the target answers them greedily (both stages of two-stage tasks, ``--max-new-tokens``);
2. teacher forcing + the training forward (``updraft.train``): per-step accuracy over ALL
   response positions (what ``train-draft`` reports as held-out accuracy; first and second
   stages apart), and the greedy chains simulated along the first-stage responses cut at
   ``--max-tokens`` (``updraft.train.losses.chain_acceptance``: verify steps start only after a
   rejection, so their first position is harder than the average position);
3. ``--engine``: the speculative engine itself on the same first-stage prompts (S pinned), and
   the simulation on the engine's own outputs: in fp32 the two are equal (the engine drafts
   exactly what the training forward computes, tests/train/test_first_draft.py); in bf16 their
   difference is what the numerics of the verify features cost.

Example (CPU, fp32; on a GPU add ``--device cuda --dtype bfloat16``):

    python benchmarks/draft_gap.py --head builtin:smollm2 --prompts 16 --max-tokens 192 --engine
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from updraft.config import EngineConfig, SpeculativeConfig
from updraft.data.prompts import build_prompts, split_prompts
from updraft.engine.engine import Engine
from updraft.heads import resolve_draft_path
from updraft.models.eagle import Eagle3Head, default_aux_layers, load_draft_head
from updraft.models.loader import load_checkpoint
from updraft.models.resolve import resolve_model
from updraft.sampling_params import SamplingParams
from updraft.train.data import DistillData, collect_sequences, teacher_force
from updraft.train.losses import LossConfig, TargetHead, chain_acceptance, compute_loss


def per_step_accuracy(head, data: DistillData, steps: int, labels: TargetHead) -> list[float]:  # noqa: ANN001
    hits, rows = [0.0] * steps, [0.0] * steps
    for s in range(data.num_seqs):
        _, m = compute_loss(head, data.batch([s], data.tokens.device, isinstance(head, Eagle3Head)), LossConfig(steps=steps), labels)
        for k in range(steps):
            hits[k] += m.get(f"acc{k}", 0.0) * m.get(f"rows{k}", 0.0)
            rows[k] += m.get(f"rows{k}", 0.0)
    return [h / r if r else 0.0 for h, r in zip(hits, rows)]


def chains(head, data: DistillData, steps: int, labels: TargetHead) -> dict[str, object]:  # noqa: ANN001
    verify, accepted = 0, [0] * steps
    for s in range(data.num_seqs):
        v, a = chain_acceptance(head, data.batch([s], data.tokens.device, isinstance(head, Eagle3Head)), steps, labels)
        verify += v
        accepted = [x + y for x, y in zip(accepted, a)]
    return {"verify_steps": verify, "accept_length": 1 + sum(accepted) / max(1, verify),
            "per_position": [x / max(1, verify) for x in accepted]}


def run_engine(args: argparse.Namespace, loaded, head_dir: str, prompts: list[list[int]]) -> tuple[list[list[int]], dict[str, object]]:  # noqa: ANN001
    spec = SpeculativeConfig(method=args.method, draft_model=head_dir, num_steps=args.steps, adaptive=False)
    engine = Engine(EngineConfig(model=str(loaded.source), device=args.device, dtype=args.dtype, progress=False,
                                 max_total_tokens=len(prompts) * (args.max_tokens + 1024), max_running_requests=len(prompts),
                                 cuda_graph_max_bs=len(prompts), speculative=spec), loaded=loaded)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    reqs = [engine.add_request(p, params, detokenize=False) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    st = engine.spec_stats
    out = {"verify_steps": st.num_drafts, "accept_length": st.mean_accept_length, "per_position": st.per_position_rate()}
    seqs = [list(r.prompt_ids) + list(r.output_ids) for r in reqs]
    del engine
    loaded.model.aux_layers = ()
    return seqs, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default")
    p.add_argument("--head", default="builtin:smollm2")
    p.add_argument("--method", default="eagle3", choices=["eagle", "eagle3"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--prompts", type=int, default=16, help="held-out prompts (first of the split)")
    p.add_argument("--num-prompts", type=int, default=14000, help="size of the prompt pool the split is taken from")
    p.add_argument("--held-out", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=320, help="response length of the teacher-forced data")
    p.add_argument("--max-tokens", type=int, default=192, help="response length of the chains / the engine check")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--engine", action="store_true", help="also run the speculative engine (S pinned)")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = p.parse_args()
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    loaded = load_checkpoint(resolve_model(args.model), dtype=dtype, device=args.device, progress=False)
    _, held = split_prompts(build_prompts(args.num_prompts, args.seed), args.held_out, args.seed)
    held = held[: args.prompts]
    plain = Engine(EngineConfig(model=str(loaded.source), device=args.device, dtype=args.dtype, progress=False,
                                max_total_tokens=32768, max_running_requests=len(held)), loaded=loaded)
    t0 = time.time()
    gen = collect_sequences(plain, held, args.max_new_tokens, progress=False)
    head_dir = resolve_draft_path(args.head)
    head = load_draft_head(head_dir, loaded.model, dtype, torch.device(args.device))
    aux = default_aux_layers(loaded.config.num_layers) if args.method == "eagle3" else ()
    labels = TargetHead(head)
    first = [k for k, i in enumerate(gen.prompt_index) if k == 0 or gen.prompt_index[k - 1] != i]
    second = [k for k in range(len(gen.seqs)) if k not in first]
    data = teacher_force(plain, gen.seqs, gen.prompt_lens, aux, progress=False)
    cut = [gen.seqs[k][: gen.prompt_lens[k] + args.max_tokens] for k in first]
    data_cut = teacher_force(plain, cut, [gen.prompt_lens[k] for k in first], aux, progress=False)
    with torch.no_grad():
        r: dict[str, object] = {
            "prompts": len(held), "sequences": len(gen.seqs), "generated_tokens": gen.stats["generated_tokens"],
            "tf_accuracy_all": per_step_accuracy(head, data, args.steps, labels),
            "tf_accuracy_stage1": per_step_accuracy(head, data.subset(first), args.steps, labels),
            "tf_accuracy_stage2": per_step_accuracy(head, data.subset(second), args.steps, labels) if second else None,
            "chains_all": chains(head, data, args.steps, labels),
            "chains_stage1_cut": chains(head, data_cut, args.steps, labels),
        }
    del plain
    if args.engine:
        ids = [chat_ids_of(loaded, p.text) for p in held]
        seqs, r["engine"] = run_engine(args, loaded, head_dir, ids)
        plain = Engine(EngineConfig(model=str(loaded.source), device=args.device, dtype=args.dtype, progress=False,
                                    max_total_tokens=32768, max_running_requests=len(held)), loaded=loaded)
        own = teacher_force(plain, seqs, [len(i) for i in ids], aux, progress=False)
        with torch.no_grad():
            r["chains_on_engine_outputs"] = chains(head, own, args.steps, labels)
    r["wall_s"] = time.time() - t0
    print(json.dumps(r, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(r, indent=1) + "\n")


def chat_ids_of(loaded, text: str) -> list[int]:  # noqa: ANN001
    return loaded.tokenizer.encode_chat([{"role": "user", "content": text}], add_generation_prompt=True)


if __name__ == "__main__":
    main()

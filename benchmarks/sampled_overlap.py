"""Issue 13: how often heads' sampled drafts would be accepted, side by side, without a GPU.

    python benchmarks/sampled_overlap.py --heads builtin:smollm2,PATH[,...] --out DIR \
        [--sets mt_bench=80] [--temperature 0.7] [--top-p 0.9]

Lossless rejection sampling accepts a draft token drawn from q with probability ``sum_x min(p(x), q(x))``
(p the target's distribution): that overlap is a head's expected acceptance at one position, exact, with no
sampling noise (an engine run of 16 sampled requests moves by several percent from seed to seed). The target's
answers to each set are sampled at the same temperature (``collect_sequences`` applies no top-p; one seed: the
same texts for every head) and teacher-forced; every head is unrolled over them as in training (``train.forward.unroll``: step k of row j
drafts token j + k + 2 from the target's distribution at position j + k + 1, the earlier steps' tokens taken from
the text). Per step k the mean overlap over the answer positions gives a_k, and ``1 + sum_k prod_{i<=k} a_i`` an
expected accept length (the trainer's held-out estimate, with overlaps in place of greedy hits).

The distributions are the engine's (``spec.fused``: sampled drafts come from the draft's top
``DRAFT_CANDIDATES`` logits with the request's temperature and top-p; the target's from its whole vocabulary with
the same filter); the heads are EAGLE-3 heads reading the same target layers (one teacher forcing serves them all).

Writes ``sampled_overlap.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from vocab_gain import answers, batches, load_heads, parse_sets  # a sibling script (benchmarks/)

from updraft.models.eagle import Eagle3Head
from updraft.spec.drafter import DRAFT_CANDIDATES
from updraft.train.data import DistillData, TrainBatch
from updraft.train.forward import head_logits, shift_left, unroll
from updraft.train.losses import expected_accept_length


def filtered(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Softmax of ``logits / temperature`` (float64) keeping the smallest best-first prefix whose mass reaches
    ``top_p`` (the token that crosses it included), renormalised."""
    p = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p >= 1.0:
        return p
    srt, idx = p.sort(dim=-1, descending=True)
    keep = (srt.cumsum(-1) - srt) < top_p  # the mass before a token has not reached top_p yet
    srt = torch.where(keep, srt, torch.zeros_like(srt))
    return torch.zeros_like(p).scatter(-1, idx, srt / srt.sum(-1, keepdim=True))


def step_overlaps(head: Eagle3Head, batch: TrainBatch, steps: int, temperature: float, top_p: float,
                  candidates: int = DRAFT_CANDIDATES, chunk: int = 256) -> tuple[list[float], list[int]]:
    """Per draft step k: (sum over answer positions of ``sum_x min(p, q)``, positions). q: the head's step-k
    distribution over its top ``candidates`` logits (target ids); p: the target's at position j + k + 1
    (float64 over the whole vocabulary, ``chunk`` positions at a time)."""
    draft_ids = head.vocab_ids()
    w = head.shared.lm_head_weight().detach()
    hidden = batch.hidden.flatten(0, 1)
    sums, counts = [], []
    with torch.no_grad():
        for k, out in enumerate(unroll(head, batch.ids, batch.head_input(), steps)):
            # row j's step k drafts token j + k + 2, where the engine drafts: a verify step's row j has its
            # token j + 1 committed in the answer (target_mask[j]: the first answer token is the target's own),
            # and token j + k + 2 is in the answer too
            mask = batch.target_mask & shift_left(batch.target_mask, k + 1, fill=False)
            rows = mask.flatten().nonzero().squeeze(-1)
            vals, cand = head_logits(head, out.flatten(0, 1)[rows]).topk(min(candidates, len(draft_ids)), dim=-1)
            cand = draft_ids[cand]
            q = filtered(vals, temperature, top_p)  # [N, K] over the candidates
            total = 0.0
            for a in range(0, len(rows), chunk):
                p = filtered(F.linear(hidden[rows[a : a + chunk] + k + 1].to(w.dtype), w), temperature, top_p)
                total += float(torch.minimum(p.gather(-1, cand[a : a + chunk]), q[a : a + chunk]).sum())
            sums.append(total)
            counts.append(len(rows))
    return sums, counts


def expected_accept(per_step: list[float]) -> float:
    """``1 + sum_k prod_{i<=k} a_i``, the trainer's estimate (``train.losses.expected_accept_length``)."""
    return expected_accept_length({f"acc{k}": a for k, a in enumerate(per_step)}, len(per_step))


def head_row(head: Eagle3Head, data: DistillData, device: torch.device, steps: int, temperature: float,
             top_p: float) -> dict[str, Any]:
    sums, counts = [0.0] * steps, [0] * steps
    for _, batch in batches(data, device):
        s, c = step_overlaps(head, batch, steps, temperature, top_p)
        sums = [a + b for a, b in zip(sums, s, strict=True)]
        counts = [a + b for a, b in zip(counts, c, strict=True)]
    per_step = [s / max(c, 1) for s, c in zip(sums, counts, strict=True)]
    return dict(per_step=per_step, positions=counts, expected_accept_len=expected_accept(per_step))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", required=True, help="comma-separated head folders or builtin:NAME")
    ap.add_argument("--model", default="default", help="target (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--sets", default="mt_bench=80", help="eval sets and prompts each")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0, help="the answers' sampling seed")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if not args.temperature > 0:
        raise ValueError(f"--temperature {args.temperature}: must be > 0 (greedy chains: benchmarks/vocab_gain.py)")
    if not 0 < args.top_p <= 1:
        raise ValueError(f"--top-p {args.top_p}: must be in (0, 1]")
    names = args.heads.split(",")
    device = torch.device(args.device)
    engine, heads, aux = load_heads(args.model, names, device)
    result: dict[str, Any] = dict(heads=names, steps=args.steps, temperature=args.temperature, top_p=args.top_p,
                                  seed=args.seed, max_tokens=args.max_tokens, dtype=str(engine.dtype), sets={})
    for name, n in parse_sets(args.sets).items():
        data, count = answers(engine, name, n, args.max_tokens, aux, args.temperature, args.seed)
        rows = [head_row(h, data, device, args.steps, args.temperature, args.top_p) for h in heads]
        result["sets"][name] = dict(prompts=count, heads=rows)
        for hn, r in zip(names, rows, strict=True):
            print(f"{name} {hn}: expected accept length {r['expected_accept_len']:.3f}, per step "
                  f"{[round(a, 3) for a in r['per_step']]}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sampled_overlap.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""Issue 13: does a larger draft vocabulary turn its coverage into accepted first drafts?

    python benchmarks/vocab_gain.py --heads builtin:smollm2,PATH --out DIR [--sets mt_bench=80,sum=20,qa=20]

Two EAGLE-3 heads over the same target (they must read the same target layers) walked over the same
teacher-forced greedy answers (the target's, from a plain engine; CPU fp32 by default, where the chain walks
equal the engine's own accept lengths: ``train.losses.chain_steps``). Per set:

- each head's greedy S-step chains: accept length and first-draft acceptance, as the engine would measure them;
- every answer position's first draft (the head's step 0 from the target's feature there), split by which
  head's draft vocabulary holds the token to draft: in both, only in the second head's, in neither (and only
  in the first's). The "only in the second" class is what the larger vocabulary bought: the first head can
  never draft those tokens; the figure shows how many of them the second head drafts right, beside its
  accuracy on the tokens both hold (did growing the vocabulary cost the old tokens anything?).

Writes ``vocab_gain.json``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from acceptance_by_confidence import target_and_head  # a sibling script (benchmarks/)

from updraft.bench.prompts import load_prompt_rows
from updraft.data.types import TrainPrompt
from updraft.engine.engine import Engine
from updraft.heads import resolve_draft_path
from updraft.models.eagle import Eagle3Head, load_draft_head
from updraft.train.data import DistillData, TrainBatch, collect_sequences, teacher_force
from updraft.train.forward import head_logits, shift_left, unroll
from updraft.train.losses import TargetHead, chain_steps

CLASSES = ("both", "second_only", "first_only", "neither")


def parse_sets(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        name, _, n = part.partition("=")
        if not n.isdigit():
            raise ValueError(f"--sets: {part!r} is not NAME=COUNT")
        out[name] = int(n)
    return out


def batches(data: DistillData, device: torch.device, size: int = 8) -> Iterator[tuple[int, TrainBatch]]:
    """(first sequence index, batch) over ``data`` in order."""
    for start in range(0, data.num_seqs, size):
        yield start, data.batch(list(range(start, min(start + size, data.num_seqs))), device, eagle3=True)


def load_heads(model: str, names: list[str], device: torch.device) -> tuple[Engine, list[Eagle3Head], tuple[int, ...]]:
    """A plain engine on the target and the EAGLE-3 heads ``names`` over it (fp32), and the target layers
    they all read (one teacher forcing serves them all)."""
    engine, first = target_and_head(model, names[0], device)
    heads = [first] + [load_draft_head(resolve_draft_path(n), engine.model, torch.float32, device) for n in names[1:]]
    if not all(isinstance(h, Eagle3Head) for h in heads):
        raise ValueError("--heads: every head must be an EAGLE-3 head (a draft vocabulary)")
    aux = {tuple(h.head_config.aux_layer_ids) for h in heads}
    if len(aux) != 1:
        raise ValueError(f"--heads read different target layers ({sorted(aux)}): one teacher forcing cannot serve them")
    return engine, heads, aux.pop()


def answers(engine: Engine, name: str, n: int, max_tokens: int, aux: tuple[int, ...], temperature: float = 0.0,
            seed: int = 0) -> tuple[DistillData, int]:
    """The target's answers to the first ``n`` prompts of eval set ``name`` (greedy, or sampled at
    ``temperature`` from ``seed``), teacher-forced with the target layers ``aux``; and how many prompts."""
    prompts = [TrainPrompt(r.text, r.category or name) for r in load_prompt_rows(name, n)]
    gen = collect_sequences(engine, prompts, max_tokens, temperature=temperature, seed=seed, progress=False)
    return teacher_force(engine, gen.seqs, gen.prompt_lens, aux_layers=aux, progress=False), len(prompts)


def first_drafts(head: Eagle3Head, data: DistillData, device: torch.device) -> list[tuple[int, int, int, bool]]:
    """Every answer position's first draft over ``data``: (sequence, committed length N, token N,
    whether the head's step 0 at row N - 2 drafts it; ``chain_steps``' convention), from the first
    verify step of each sequence (N = prompt length + 1: the first answer token is the target's)."""
    labels = TargetHead(head)
    out: list[tuple[int, int, int, bool]] = []
    for start, batch in batches(data, device):
        with torch.no_grad():
            top = labels.draft_ids[head_logits(head, unroll(head, batch.ids, batch.head_input(), 1)[0]).argmax(-1)]
        want = shift_left(batch.ids, 2, fill=-1)
        # row r drafts token r + 2; target_mask[r] marks a row whose next token is an answer token, so rows
        # where r and r + 1 both do are the verify steps' first drafts (the first answer token is the target's)
        mask = batch.target_mask & shift_left(batch.target_mask, 1, fill=False) & (want >= 0)
        for b, r in mask.nonzero().tolist():
            out.append((start + b, r + 2, int(want[b, r]), bool(top[b, r] == want[b, r])))
    return out


def chains(head: Eagle3Head, data: DistillData, device: torch.device, steps: int) -> dict[str, float]:
    labels = TargetHead(head)
    walk: list[int] = []
    for _, batch in batches(data, device):
        with torch.no_grad():
            walk += [m for _, _, m in chain_steps(head, batch, steps, labels)]
    return dict(verify_steps=len(walk), accept_len=1 + sum(walk) / len(walk), first=sum(m > 0 for m in walk) / len(walk))


def by_class(tokens: list[int], hits: list[list[bool]], vocab: list[torch.Tensor]) -> dict[str, dict[str, Any]]:
    """Positions per vocabulary class and each head's first-draft accuracy there."""
    ids = torch.tensor(tokens, dtype=torch.long)
    inside = [v[ids] for v in vocab]
    cls = {"both": inside[0] & inside[1], "second_only": ~inside[0] & inside[1],
           "first_only": inside[0] & ~inside[1], "neither": ~inside[0] & ~inside[1]}
    h = [torch.tensor(x) for x in hits]
    out = {}
    for name in CLASSES:
        sel = cls[name]
        n = int(sel.sum())
        out[name] = dict(positions=n, share=n / max(len(tokens), 1),
                         first_acc=[float(x[sel].float().mean()) if n else 0.0 for x in h])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", required=True, help="FIRST,SECOND: head folders or builtin:NAME (EAGLE-3)")
    ap.add_argument("--model", default="default", help="target (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--sets", default="mt_bench=80,sum=20,qa=20", help="eval sets and prompts each")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sets = parse_sets(args.sets)
    names = args.heads.split(",")
    if len(names) != 2:
        raise ValueError(f"--heads: give two heads, FIRST,SECOND (got {args.heads!r})")
    device = torch.device(args.device)
    engine, heads, aux = load_heads(args.model, names, device)
    vocab = [TargetHead(h).in_draft.cpu() for h in heads]
    result: dict[str, Any] = dict(heads=names, draft_vocab=[int(v.sum()) for v in vocab], steps=args.steps,
                                  max_tokens=args.max_tokens, dtype=str(engine.dtype), sets={})
    for name, n in sets.items():
        data, count = answers(engine, name, n, args.max_tokens, aux)
        drafts = [first_drafts(h, data, device) for h in heads]
        tokens = [t for _, _, t, _ in drafts[0]]
        row = dict(prompts=count, chains=[chains(h, data, device, args.steps) for h in heads],
                   classes=by_class(tokens, [[hit for *_, hit in d] for d in drafts], vocab))
        result["sets"][name] = row
        c = row["classes"]
        print(f"{name}: accept length {row['chains'][0]['accept_len']:.3f} -> {row['chains'][1]['accept_len']:.3f}, "
              f"first {row['chains'][0]['first']:.3f} -> {row['chains'][1]['first']:.3f}", flush=True)
        for k in CLASSES:
            print(f"  {k:12s} {c[k]['positions']:6d} positions ({c[k]['share']:.3f}): first-draft accuracy "
                  f"{c[k]['first_acc'][0]:.3f} / {c[k]['first_acc'][1]:.3f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vocab_gain.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

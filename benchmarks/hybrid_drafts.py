"""Issue 13: would n-gram drafts (prompt lookup) lift the sets where the EAGLE-3 head accepts
least, if an iteration verified the n-gram chain instead of the head's where the history has a
good match?

    python benchmarks/hybrid_drafts.py --out DIR [--sets sum,alpaca,mt_bench] [--limit 20] [--max-tokens 256]

Per set: the target's greedy answers (plain engine), the head's greedy chains of ``--steps``
drafts from the teacher-forced unroll (``train.losses.chain_steps``'s walk: in fp32 the engine's
own accept lengths), and at every committed length the n-gram proposer's drafts over the same
history (``spec.ngram.NgramIndex``, the engine's defaults n = 1..4) with the length of the suffix
it matched. Then the walk along each answer under several choosers (which chain a verify step
checks): the head alone, n-gram alone, the better of the two (an oracle, the bound), and "n-gram
where its suffix match is at least n tokens long, else the head". Each chooser's walk advances by
its own accept lengths, so the verify steps differ between choosers. Writes
``hybrid_drafts.json``; CPU fp32 is the default.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from acceptance_by_confidence import target_and_head  # noqa: E402

from updraft.bench.prompts import load_prompt_rows  # noqa: E402
from updraft.config import SpeculativeConfig  # noqa: E402
from updraft.data.types import TrainPrompt  # noqa: E402
from updraft.engine.engine import Engine  # noqa: E402
from updraft.models.eagle import default_aux_layers  # noqa: E402
from updraft.spec.ngram import NgramIndex  # noqa: E402
from updraft.train.data import collect_sequences, teacher_force  # noqa: E402
from updraft.train.forward import head_logits, unroll  # noqa: E402
from updraft.train.losses import TargetHead  # noqa: E402


def head_drafts(head: Any, batch: Any, steps: int) -> tuple[list[list[list[int]]], list[list[float]]]:
    """``tops[k][b][i]``: the token step ``k`` of head row ``i`` drafts for position ``i + k + 2``
    of sequence ``b`` (``chain_steps``'s unroll, target ids); ``conf[b][i]``: the head's
    probability of its first draft there (step 0's softmax over the draft vocabulary)."""
    labels = TargetHead(head)
    outs = unroll(head, batch.ids, batch.head_input(), steps)
    tops, conf = [], []
    for k, out in enumerate(outs):
        logits = head_logits(head, out).float()
        top = logits.argmax(-1)
        if k == 0:
            conf = logits.softmax(-1).amax(-1).tolist()
        if labels.draft_ids is not None:
            top = labels.draft_ids[top]
        tops.append(top.tolist())
    return tops, conf


#: head drafts, lookup drafts, match length, the text's next tokens, the head's first-draft probability
Step = tuple[list[int], list[int], int, list[int], float]


def sequence_table(ids: list[int], first: int, n: int, tops: list[list[list[int]]], conf: list[list[float]], b: int,
                   steps: int, spec: SpeculativeConfig) -> dict[int, Step]:
    """Per committed length ``N`` in ``[first + 2, n)``: the head's drafts, the lookup's, the
    lookup's match length, the tokens the drafts must equal (positions ``N..``, fewer at the
    end) and the head's probability of its first draft."""
    idx = NgramIndex(spec.ngram_min, spec.ngram_max)
    idx.extend(ids[: first + 2])
    table = {}
    for pos in range(first + 2, n):
        drafts, match = idx.lookup(steps)
        table[pos] = ([tops[k][b][pos - 2] for k in range(steps)], drafts, match, ids[pos : min(pos + steps, n)],
                      conf[b][pos - 2])
        idx.extend([ids[pos]])
    return table


def accepted(chain: list[int], truth: list[int]) -> int:
    m = 0
    while m < len(truth) and chain[m] == truth[m]:
        m += 1
    return m


def walk(table: dict[int, Step], start: int, n: int, choose: Any) -> list[int]:
    """Accept lengths (drafts accepted) of the verify steps a chooser's walk makes."""
    out, pos = [], start
    while pos < n:
        h, g, match, truth, conf = table[pos]
        m = accepted(choose(h, g, match, truth, conf), truth)
        out.append(m)
        pos += m + 1
    return out


def _best(h: list[int], g: list[int], match: int, truth: list[int], conf: float) -> list[int]:
    return h if accepted(h, truth) >= accepted(g, truth) else g


CHOOSERS = {
    "head": lambda h, g, match, truth, conf: h,
    "ngram": lambda h, g, match, truth, conf: g,
    "oracle": _best,
    **{f"ngram_if_match>={t}": (lambda t: lambda h, g, match, truth, conf: g if match >= t else h)(t) for t in (1, 2, 3, 4)},
    # the lookup also where it agrees with the head's first draft (a match of any length)
    **{f"ngram_if_match>={t}_or_agrees": (lambda t: lambda h, g, match, truth, conf: g if match >= t or (match and g[0] == h[0])
                                          else h)(t) for t in (2, 3)},
    # the lookup only where it also agrees with the head's first draft
    **{f"ngram_if_match>={t}_and_agrees": (lambda t: lambda h, g, match, truth, conf: g if match >= t and g[0] == h[0]
                                           else h)(t) for t in (1, 2, 3)},
    # the lookup also where any match meets a head unsure of its first draft
    **{f"ngram_if_match>=3_or_head_below_{c}": (lambda c: lambda h, g, match, truth, conf: g if match >= 3 or (match and conf < c)
                                                else h)(c) for c in (0.2, 0.35, 0.5)},
}


def run_set(engine: Engine, head: Any, prompts: list[TrainPrompt], max_tokens: int, steps: int,
            spec: SpeculativeConfig) -> dict[str, Any]:
    gen = collect_sequences(engine, prompts, max_tokens, progress=False)
    aux = head.head_config.aux_layer_ids or default_aux_layers(engine.model.config.num_layers)
    data = teacher_force(engine, gen.seqs, gen.prompt_lens, aux_layers=tuple(aux), progress=False)
    walks: dict[str, list[int]] = {name: [] for name in CHOOSERS}
    for start in range(0, data.num_seqs, 8):
        batch = data.batch(list(range(start, min(start + 8, data.num_seqs))), engine.device, eagle3=True)
        with torch.no_grad():
            tops, conf = head_drafts(head, batch, steps)
        for b, mask in enumerate(batch.target_mask.tolist()):
            if True not in mask:
                continue
            first, n = mask.index(True), len(mask) - mask[::-1].index(True) + 1
            table = sequence_table(batch.ids[b].tolist(), first, n, tops, conf, b, steps, spec)
            for name, choose in CHOOSERS.items():
                walks[name] += walk(table, first + 2, n, choose)
    return {name: dict(steps=len(w), accept_len=1 + sum(w) / max(len(w), 1),
                       per_position=[sum(m > k for m in w) / max(len(w), 1) for k in range(steps)])
            for name, w in walks.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--model", default="default", help="target (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--sets", default="sum,alpaca,mt_bench")
    ap.add_argument("--limit", type=int, default=20, help="prompts per set")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    engine, head = target_and_head(args.model, args.head, torch.device(args.device), kv_tokens=32768)
    dtype = engine.dtype
    spec = SpeculativeConfig(method="ngram")
    result: dict[str, Any] = dict(head=args.head, steps=args.steps, max_tokens=args.max_tokens, dtype=str(dtype),
                                  ngram=[spec.ngram_min, spec.ngram_max], sets={})
    for name in args.sets.split(","):
        prompts = [TrainPrompt(r.text, r.category or name) for r in load_prompt_rows(name, args.limit)]
        result["sets"][name] = r = run_set(engine, head, prompts, args.max_tokens, args.steps, spec)
        print(f"{name} ({len(prompts)} prompts): " + ", ".join(f"{k} {v['accept_len']:.3f}" for k, v in r.items()),
              flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hybrid_drafts.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

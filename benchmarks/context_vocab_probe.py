"""Issue 13: can an EAGLE-3 head draft the context's tokens that its draft vocabulary lacks?

    python benchmarks/context_vocab_probe.py --head builtin:smollm2 --sets sum=20,qa=20,mt_bench=80 --out DIR

A truncated draft vocabulary cannot draft words a summary copies from its article (15% of sum's answer tokens
lie outside the shipped head's 8,192). This probe gives the head rows for those tokens without training
anything: its own ``lm_head`` rows ``W_d`` against the target's LM head rows of the same tokens are fitted by
least squares, ``W_d ~ W_t[vocab] @ A`` (one 576 x 576 map), and a token outside the vocabulary gets the row
``W_t[x] @ A``: the draft vocabulary's logits extrapolated. At each draft, the tokens outside the vocabulary
that occur in the request's context (``--context history``: prompt and answer so far; ``prompt``: the prompt
only, as a fixed per-request table would hold them) compete with the vocabulary's argmax.

Over teacher-forced greedy answers (as ``vocab_gain.py``; CPU fp32, where ``chain_steps``' walks equal the
engine's accept lengths), per set: greedy S-step chains without and with those tokens (accept length, first
position), and every answer position's first draft split by where the token to draft lies (in the vocabulary,
outside it but in the context, neither). Writes ``context_vocab_probe.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from vocab_gain import answers, batches, load_heads, parse_sets  # sibling scripts (benchmarks/)

from updraft.models.eagle import Eagle3Head
from updraft.spec.context_vocab import extrapolation_map
from updraft.train.data import TrainBatch
from updraft.train.forward import norm, shift_left, unroll
from updraft.train.losses import TargetHead

VARIANTS = ("base", "history", "prompt")


def extrapolated_rows(head: Eagle3Head) -> torch.Tensor:
    """``W_t @ A`` [V, h]: every target token's row in the draft LM head's own logit space (the engine's map,
    ``extrapolation_map``, without the head's calibration)."""
    return head.shared.lm_head_weight().detach().float() @ extrapolation_map(head)


def first_positions(ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Index of each of ``tokens``' first occurrence in ``ids`` (every token occurs)."""
    pos = torch.arange(len(ids))
    return torch.stack([pos[ids == t].min() for t in tokens]) if len(tokens) else torch.zeros(0, dtype=torch.long)


def walk(hits: list[torch.Tensor], first: int, n: int, steps: int) -> list[int]:
    """``chain_steps``' walk over one sequence: drafts accepted per verify step."""
    out, pos = [], first + 2
    while pos < n:
        m = 0
        while m < steps and pos + m < n and bool(hits[m][pos - 2]):
            m += 1
        out.append(m)
        pos += m + 1
    return out


def probe_batch(head: Eagle3Head, labels: TargetHead, rows_x: torch.Tensor, batch: TrainBatch, steps: int,
                acc: dict[str, Any]) -> None:
    in_vocab = labels.in_draft
    with torch.no_grad():
        outs = [norm(head.norm, o) for o in unroll(head, batch.ids, batch.head_input(), steps)]
        logits = [head.lm_head(o) for o in outs]
    length = batch.ids.shape[1]
    for b, mask in enumerate(batch.target_mask.tolist()):
        if True not in mask:
            continue
        first, n = mask.index(True), len(mask) - mask[::-1].index(True) + 1
        ids = batch.ids[b, :n]
        oov = ~in_vocab[ids]
        uniq = torch.unique(ids[oov])
        first_at = first_positions(ids, uniq)  # of each context token outside the vocabulary
        in_prompt = first_at <= first  # prompt = ids[0..first] (the first answer token is ids[first + 1])
        acc["oov_in_prompt"].append(int(in_prompt.sum()))
        hits: dict[str, list[torch.Tensor]] = {v: [] for v in VARIANTS}
        rows = torch.arange(length)
        for k in range(steps):
            dl = logits[k][b]  # [L, Vd]; row r drafts token r + k + 2 and knows ids[0..r + k + 1]
            best, arg = dl.max(-1)
            base = labels.draft_ids[arg]
            want = shift_left(batch.ids[b : b + 1], k + 2, fill=-1)[0]
            hits["base"].append(base == want)
            if len(uniq):
                el = outs[k][b] @ rows_x[uniq].T  # [L, U]
                for v, allow in (("history", first_at[None, :] <= (rows + k + 1)[:, None]),
                                 ("prompt", in_prompt[None, :].expand(length, -1))):
                    ev = el.masked_fill(~allow, float("-inf"))
                    emax, earg = ev.max(-1)
                    pick = torch.where(emax > best, uniq[earg], base)
                    hits[v].append(pick == want)
            else:
                hits["history"].append(hits["base"][-1])
                hits["prompt"].append(hits["base"][-1])
        for v in VARIANTS:
            acc["walk"][v] += walk(hits[v], first, n, steps)
        # first drafts at every answer position (step 0), by the token's class
        for r in range(first, n - 2):
            tok = int(ids[r + 2])
            cls = "vocab" if bool(in_vocab[tok]) else ("context" if bool((first_at[uniq == tok] <= r + 1).any()) else "neither")
            c = acc["classes"].setdefault(cls, {v: 0 for v in ("positions", *VARIANTS)})
            c["positions"] += 1
            for v in VARIANTS:
                c[v] += int(hits[v][0][r])


def summarise(acc: dict[str, Any], steps: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v in VARIANTS:
        w = acc["walk"][v]
        out[v] = dict(verify_steps=len(w), accept_len=1 + sum(w) / len(w),
                      per_position=[sum(m > k for m in w) / len(w) for k in range(steps)])
    total = sum(c["positions"] for c in acc["classes"].values())
    out["first_draft"] = {cls: dict(positions=c["positions"], share=c["positions"] / total,
                                    **{v: c[v] / c["positions"] for v in VARIANTS})
                          for cls, c in sorted(acc["classes"].items())}
    p = acc["oov_in_prompt"]
    out["prompt_tokens_outside_vocab"] = dict(mean=sum(p) / len(p), max=max(p))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--model", default="default")
    ap.add_argument("--sets", default="mt_bench=80,humaneval=20,gsm8k=20,alpaca=20,sum=20,qa=20")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    device = torch.device("cpu")
    engine, (head,), aux = load_heads(args.model, [args.head], device)
    labels = TargetHead(head)
    rows_x = extrapolated_rows(head)
    result: dict[str, Any] = dict(head=args.head, steps=args.steps, max_tokens=args.max_tokens, sets={})
    for name, n in parse_sets(args.sets).items():
        data, count = answers(engine, name, n, args.max_tokens, aux)
        acc: dict[str, Any] = dict(walk={v: [] for v in VARIANTS}, classes={}, oov_in_prompt=[])
        for _, batch in batches(data, device):
            probe_batch(head, labels, rows_x, batch, args.steps, acc)
        row = summarise(acc, args.steps)
        row["prompts"] = count
        result["sets"][name] = row
        print(f"{name}: accept length " + ", ".join(f"{v} {row[v]['accept_len']:.3f} ({row[v]['per_position'][0]:.3f})"
                                                  for v in VARIANTS), flush=True)
        for cls, c in row["first_draft"].items():
            print(f"  {cls:8s} {c['share']:.3f} of positions: first draft " + " / ".join(f"{c[v]:.3f}" for v in VARIANTS))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "context_vocab_probe.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

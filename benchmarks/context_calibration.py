"""Issue 13: does an affine calibration of the context tokens' extrapolated logits draft more?

    python benchmarks/context_calibration.py --own 200 --seed 777 --out DIR [--write-head HEAD_FOLDER]

``context_vocab_probe.py`` lets a context token outside the draft vocabulary compete with the vocabulary's
best logit through its least-squares row, unscaled and unshifted. A context token is likelier to come next than
its extrapolated row says (the request just used it), or less likely (the map is fitted to frequent tokens);
``s * logit + b`` moves that balance. The scale and bias are fitted on the target's greedy answers to OUR OWN
prompts (``build_prompts(--own, --seed, --prompt-set)``, never the evaluation sets) by a grid search over the
greedy S-step chains' accept length (the ``history`` context), then every evaluation set is walked with (1, 0)
and with the fitted pair. The grid also tries a bonus for the context's tokens INSIDE the vocabulary (their own
logits plus ``known``), which the engine does not implement (``known`` 0 is what the fit chose for the shipped
head). A positive scale keeps the context tokens' own order, so one pass per set records, per draft step and
position, the vocabulary's best logit, the best context logit and whether each is right; the grid replays the
walks from those. Writes ``context_calibration.json``; ``--write-head`` puts the fitted (scale, bias) without
the bonus into a head folder's ``config.json`` (``updraft_context_vocab``, read by ``ContextVocab``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from context_vocab_probe import extrapolated_rows, first_positions, walk  # siblings (benchmarks/)
from vocab_gain import answers, batches, load_heads, parse_sets

from updraft.data.prompts import PROMPT_SETS, build_prompts
from updraft.engine.engine import Engine
from updraft.models.eagle import CONTEXT_KEY, Eagle3Head
from updraft.train.data import DistillData, TrainBatch, collect_sequences, teacher_force
from updraft.train.forward import norm, shift_left, unroll
from updraft.train.losses import TargetHead

SCALES = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0)
BIASES = (-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0)
#: bonus for the context's tokens inside the vocabulary (their own rows)
KNOWN = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)


@dataclass
class Sequence:
    """One answer's draft-step records: ``[steps, L]`` each (``ctx`` -inf where no context token competes)."""

    first: int
    n: int
    best: torch.Tensor
    base_hit: torch.Tensor
    ctx: torch.Tensor
    ctx_hit: torch.Tensor
    inv: torch.Tensor  # the best logit among the context's tokens INSIDE the vocabulary (-inf: none yet)
    inv_hit: torch.Tensor


def record(head: Eagle3Head, labels: TargetHead, rows_x: torch.Tensor, batch: TrainBatch, steps: int) -> list[Sequence]:
    with torch.no_grad():
        outs = [norm(head.norm, o) for o in unroll(head, batch.ids, batch.head_input(), steps)]
        logits = [head.lm_head(o) for o in outs]
    length = batch.ids.shape[1]
    rows = torch.arange(length)
    out = []
    for b, mask in enumerate(batch.target_mask.tolist()):
        if True not in mask:
            continue
        first, n = mask.index(True), len(mask) - mask[::-1].index(True) + 1
        ids = batch.ids[b, :n]
        uniq = torch.unique(ids[~labels.in_draft[ids]])
        first_at = first_positions(ids, uniq)
        known = torch.unique(ids[labels.in_draft[ids]])
        known_at = first_positions(ids, known)
        known_d = labels.to_draft[known]  # their draft indices
        best, base_hit, ctx, ctx_hit, inv, inv_hit = [], [], [], [], [], []
        for k in range(steps):
            top, arg = logits[k][b].max(-1)
            want = shift_left(batch.ids[b : b + 1], k + 2, fill=-1)[0]
            best.append(top)
            base_hit.append(labels.draft_ids[arg] == want)
            il = logits[k][b][:, known_d].masked_fill(known_at[None, :] > (rows + k + 1)[:, None], float("-inf"))
            imax, iarg = il.max(-1)
            inv.append(imax)
            inv_hit.append(known[iarg] == want)
            if not len(uniq):
                ctx.append(torch.full_like(top, float("-inf")))
                ctx_hit.append(torch.zeros_like(base_hit[-1]))
                continue
            el = (outs[k][b] @ rows_x[uniq].T).masked_fill(first_at[None, :] > (rows + k + 1)[:, None], float("-inf"))
            emax, earg = el.max(-1)
            ctx.append(emax)
            ctx_hit.append(uniq[earg] == want)
        out.append(Sequence(first, n, *(torch.stack(x) for x in (best, base_hit, ctx, ctx_hit, inv, inv_hit))))
    return out


def collect(head: Eagle3Head, labels: TargetHead, rows_x: torch.Tensor, data: DistillData, steps: int) -> list[Sequence]:
    seqs: list[Sequence] = []
    for _, batch in batches(data, torch.device("cpu")):
        seqs += record(head, labels, rows_x, batch, steps)
    return seqs


def accept_length(seqs: list[Sequence], scale: float, bias: float, steps: int, known: float = 0.0) -> tuple[float, float]:
    """Mean accept length and first-position acceptance of the greedy chains under ``scale * logit + bias``
    for the context's tokens outside the vocabulary and ``logit + known`` for those inside it."""
    walks: list[int] = []
    for s in seqs:
        inv = s.inv + known
        hits = torch.where(inv > s.best, s.inv_hit, s.base_hit)
        hits = torch.where(s.ctx * scale + bias > torch.maximum(s.best, inv), s.ctx_hit, hits)
        walks += walk(list(hits), s.first, s.n, steps)
    return 1 + sum(walks) / len(walks), sum(m > 0 for m in walks) / len(walks)


def own_answers(engine: Engine, n: int, seed: int, prompt_set: str, max_tokens: int, aux: tuple[int, ...]) -> DistillData:
    gen = collect_sequences(engine, build_prompts(n, seed=seed, prompt_set=prompt_set), max_tokens, progress=False)
    return teacher_force(engine, gen.seqs, gen.prompt_lens, aux_layers=aux, progress=False)


def write_calibration(folder: Path, scale: float, bias: float) -> None:
    """Set the head config's ``CONTEXT_KEY`` (what ``ContextVocab`` reads) in ``folder/config.json``."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg[CONTEXT_KEY] = dict(scale=scale, bias=bias)
    path.write_text(json.dumps(cfg, indent=2) + "\n")


def add_own_and_eval_args(ap: argparse.ArgumentParser, own: int, own_help: str) -> None:
    """The flags of a script that fits or chooses on our own prompts' answers and reports on the eval sets."""
    ap.add_argument("--model", default="default")
    ap.add_argument("--own", type=int, default=own, help=own_help)
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--prompt-set", default="v6", choices=PROMPT_SETS)
    ap.add_argument("--sets", default="mt_bench=80,humaneval=20,gsm8k=20,alpaca=20,sum=20,qa=20")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head", default="builtin:smollm2")
    add_own_and_eval_args(ap, 120, "own prompts to fit on")
    ap.add_argument("--cache", type=Path, help="keep the own answers' records here (reused when present)")
    ap.add_argument("--write-head", type=Path, help="write the fitted scale and bias into this head folder's config.json")
    args = ap.parse_args()
    engine, (head,), aux = load_heads(args.model, [args.head], torch.device("cpu"))
    labels = TargetHead(head)
    rows_x = extrapolated_rows(head)
    if args.cache is not None and args.cache.exists():
        own = torch.load(args.cache, weights_only=False)
    else:
        own = collect(head, labels, rows_x,
                      own_answers(engine, args.own, args.seed, args.prompt_set, args.max_tokens, aux), args.steps)
        if args.cache is not None:
            torch.save(own, args.cache)
    grid = {(s, b, k): accept_length(own, s, b, args.steps, k) for s in SCALES for b in BIASES for k in KNOWN}
    (scale, bias, known), (fit_len, _) = max(grid.items(), key=lambda kv: kv[1][0])
    (oscale, obias, _), (ofit, _) = max(((g, v) for g, v in grid.items() if g[2] == 0.0), key=lambda kv: kv[1][0])
    print(f"own ({len(own)} answers): off {accept_length(own, 1.0, float('-inf'), args.steps)[0]:.3f}, "
          f"(1, 0) {grid[(1.0, 0.0, 0.0)][0]:.3f}, fitted outside only s {oscale} b {obias}: {ofit:.3f}, "
          f"fitted s {scale} b {bias} known {known}: {fit_len:.3f}", flush=True)
    result = dict(head=args.head, own=args.own, seed=args.seed, prompt_set=args.prompt_set, steps=args.steps,
                  scale=scale, bias=bias, known=known, outside_only=dict(scale=oscale, bias=obias),
                  grid={f"{s},{b},{k}": v for (s, b, k), v in grid.items()}, sets={})
    if args.write_head is not None:
        write_calibration(args.write_head, oscale, obias)
    for name, n in parse_sets(args.sets).items():
        seqs = collect(head, labels, rows_x, answers(engine, name, n, args.max_tokens, aux)[0], args.steps)
        row = {label: accept_length(seqs, s, b, args.steps, k)
               for label, (s, b, k) in (("off", (1.0, float("-inf"), 0.0)), ("plain", (1.0, 0.0, 0.0)),
                                        ("outside_only", (oscale, obias, 0.0)), ("fitted", (scale, bias, known)))}
        result["sets"][name] = row
        print(f"{name}: " + ", ".join(f"{k} {v[0]:.3f} ({v[1]:.3f})" for k, v in row.items()), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "context_calibration.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

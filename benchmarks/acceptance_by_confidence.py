"""Issue 13: is the head's acceptance gap between mt_bench and our own prompts a gap at equal
target confidence, or a different mix of confident positions?

    python benchmarks/acceptance_by_confidence.py --out DIR [--mt-bench 80] [--own 80] [--max-tokens 128]

For mt_bench's first turns and for prompts of our own training pool (``build_prompts`` with a
seed no training run used), the target's greedy answers (plain engine), then the engine's greedy
chains of ``--steps`` drafts simulated exactly from the teacher-forced unroll
(``train.losses.chain_acceptance``'s walk; in fp32 the engine's own accept lengths). Each verify
step is binned by the target's confidence in the token its first draft must match: the
probability of that token, the target's argmax, at the position before it. Per set and bin: the
verify steps, the first draft's acceptance and the mean accept length (bonus token counted).
Then the mix effect: each set's accept length with its own bins' acceptance but the other set's
mix of bins. If mt_bench's own-mix figure stays low, the head accepts less at equal confidence
(its data does not cover these answers); if the other mix closes the gap, the target is simply
less certain on mt_bench. Writes ``acceptance_by_confidence.json`` and ``.png``. CPU fp32 is the
default (the chains then equal the engine's exactly).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from updraft.bench.prompts import load_prompt_rows
from updraft.config import EngineConfig
from updraft.data.prompts import build_prompts
from updraft.data.types import TrainPrompt
from updraft.engine.engine import Engine
from updraft.heads import resolve_draft_path
from updraft.models.eagle import default_aux_layers, load_draft_head
from updraft.models.loader import load_checkpoint
from updraft.models.resolve import resolve_model
from updraft.train.data import collect_sequences, teacher_force
from updraft.train.losses import TargetHead, chain_steps

BINS = (0.0, 0.3, 0.5, 0.7, 0.9, 0.97, 1.0001)


Record = tuple[float, int, bool, int]  # confidence, drafts accepted, first token in the vocabulary, that token


def chains(head: Any, batch: Any, conf: torch.Tensor, steps: int) -> list[Record]:
    """(confidence, drafts accepted, first token in the draft vocabulary, that token) of every
    verify step of the greedy chains along ``batch``'s sequences (``train.losses.chain_steps``);
    ``conf`` [B, L]: the target's top probability at each position (the distribution of the
    next token)."""
    labels = TargetHead(head)
    in_vocab = torch.ones_like(batch.ids, dtype=torch.bool)
    if labels.in_draft is not None:
        in_vocab = labels.in_draft.cpu()[batch.ids.cpu()]
    conf_l, in_l, ids_l = conf.tolist(), in_vocab.tolist(), batch.ids.tolist()
    return [(conf_l[b][n - 1], m, in_l[b][n], ids_l[b][n]) for b, n, m in chain_steps(head, batch, steps, labels)]


def binned(records: list[Record]) -> list[dict[str, float]]:
    """Per confidence bin: verify steps, first-draft acceptance and accept length, and the same
    two over the steps whose first token the draft vocabulary holds (``in_vocab_*``)."""
    out = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        sel = [(m, v) for c, m, v, _ in records if lo <= c < hi]
        inv = [m for m, v in sel if v]
        out.append(dict(lo=lo, hi=min(hi, 1.0), steps=len(sel), first=sum(m > 0 for m, _ in sel) / max(len(sel), 1),
                        accept_len=1 + sum(m for m, _ in sel) / max(len(sel), 1),
                        in_vocab_steps=len(inv), in_vocab_first=sum(m > 0 for m in inv) / max(len(inv), 1),
                        in_vocab_accept_len=1 + sum(inv) / max(len(inv), 1)))
    return out


def confident_misses(records: list[Record], engine: Engine, floor: float = 0.9, top: int = 25) -> list[dict[str, Any]]:
    """The tokens the first draft missed most often where the target was at least ``floor`` sure
    of them: per token, its verify steps there, the misses and the text."""
    seen: dict[int, list[int]] = {}
    for c, m, _, tok in records:
        if c >= floor:
            seen.setdefault(tok, [0, 0])
            seen[tok][0] += 1
            seen[tok][1] += m == 0
    worst = sorted(seen.items(), key=lambda kv: -kv[1][1])[:top]
    return [dict(token=t, text=engine.tokenizer.decode([t], skip_special_tokens=False), steps=n, missed=x)
            for t, (n, x) in worst]


def answers(engine: Engine, prompts: list[TrainPrompt], max_tokens: int, head: Any, steps: int) -> list[Record]:
    gen = collect_sequences(engine, prompts, max_tokens, progress=False)
    aux = head.head_config.aux_layer_ids or default_aux_layers(engine.model.config.num_layers)
    data = teacher_force(engine, gen.seqs, gen.prompt_lens, aux_layers=tuple(aux), progress=False)
    records: list[Record] = []
    for start in range(0, data.num_seqs, 8):
        batch = data.batch(list(range(start, min(start + 8, data.num_seqs))), engine.device, eagle3=True)
        with torch.no_grad():
            logits = torch.nn.functional.linear(batch.hidden, engine.model.lm_head_weight).float()
            conf = torch.softmax(logits, -1).amax(-1)
            records += chains(head, batch, conf, steps)
    return records


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for name, r in result["sets"].items():
        rows = [b for b in r["bins"] if b["steps"] >= 20]
        mids = [(b["lo"] + b["hi"]) / 2 for b in rows]
        ax[0].plot(mids, [b["first"] for b in rows], "o-", label=f"{name} (accept length {r['accept_len']:.2f})")
        ax[1].bar([f"{b['lo']:.2f}" for b in r["bins"]], [b["steps"] / max(r["steps"], 1) for b in r["bins"]],
                  alpha=0.5, label=name)
    ax[0].set_xlabel("target's probability of the token the first draft must match")
    ax[0].set_ylabel("first draft accepted")
    ax[0].legend()
    ax[1].set_xlabel("confidence bin (from)")
    ax[1].set_ylabel("share of verify steps")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def target_and_head(model: str, head: str, device: torch.device, kv_tokens: int = 16384) -> tuple[Engine, Any]:
    """A plain engine on the target (fp32 on CPU, bf16 on CUDA; 16 requests at a time) and the
    draft head over it in fp32, as the teacher-forced chain walks use them."""
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    loaded = load_checkpoint(resolve_model(model), dtype=dtype, device=device, progress=False)
    engine = Engine(EngineConfig(model=str(loaded.source), device=device.type, dtype=str(dtype).removeprefix("torch."),
                                 progress=False, max_running_requests=16, max_total_tokens=kv_tokens), loaded=loaded)
    return engine, load_draft_head(resolve_draft_path(head), engine.model, torch.float32, device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--model", default="default", help="target (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--mt-bench", type=int, default=80)
    ap.add_argument("--own", type=int, default=80)
    ap.add_argument("--own-seed", type=int, default=24681, help="a seed no training run of the shipped head used")
    ap.add_argument("--prompt-set", default="v5")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    engine, head = target_and_head(args.model, args.head, torch.device(args.device))
    dtype = engine.dtype
    sets = {
        "mt_bench": [TrainPrompt(r.text, r.category or "mt_bench") for r in load_prompt_rows("mt_bench", args.mt_bench)],
        "own": [TrainPrompt(p.text, p.category, max_tokens=p.max_tokens)
                for p in build_prompts(args.own, seed=args.own_seed, prompt_set=args.prompt_set)],
    }
    result: dict[str, Any] = dict(head=args.head, steps=args.steps, max_tokens=args.max_tokens, dtype=str(dtype),
                                  own_seed=args.own_seed, prompt_set=args.prompt_set, sets={})
    records = {}
    for name, prompts in sets.items():
        records[name] = answers(engine, prompts, args.max_tokens, head, args.steps)
        rec = records[name]
        result["sets"][name] = dict(prompts=len(prompts), steps=len(rec),
                                    accept_len=1 + sum(r[1] for r in rec) / len(rec),
                                    first=sum(r[1] > 0 for r in rec) / len(rec),
                                    out_of_vocab=sum(not r[2] for r in rec) / len(rec),
                                    mean_conf=sum(r[0] for r in rec) / len(rec), bins=binned(rec),
                                    confident_misses=confident_misses(rec, engine))
        r = result["sets"][name]
        print(f"{name}: {len(rec)} verify steps, accept length {r['accept_len']:.3f}, first {r['first']:.3f}, "
              f"first token out of the draft vocabulary {r['out_of_vocab']:.3f}, mean confidence {r['mean_conf']:.3f}",
              flush=True)
    # the mix effect: each set's per-bin accept length under the other set's bin weights
    a, b = result["sets"]["mt_bench"], result["sets"]["own"]
    for src, mix, key in ((a, b, "mt_bench_with_own_mix"), (b, a, "own_with_mt_bench_mix")):
        # over the bins both sets populate, the mix's weights renormalised there
        pairs = [(m["steps"], x) for m, x in zip(mix["bins"], src["bins"]) if m["steps"] and x["steps"]]
        total = sum(w for w, _ in pairs) or 1
        result[key] = sum(w * x["accept_len"] for w, x in pairs) / total
        result[key + "_first"] = sum(w * x["first"] for w, x in pairs) / total
    print(f"mt_bench with its own bins' acceptance, own prompts' mix: {result['mt_bench_with_own_mix']:.3f}; "
          f"own with mt_bench's mix: {result['own_with_mt_bench_mix']:.3f}")
    for name in ("mt_bench", "own"):
        for x in result["sets"][name]["bins"]:
            print(f"  {name:8s} [{x['lo']:.2f}, {x['hi']:.2f}) steps {x['steps']:5d} first {x['first']:.3f} "
                  f"accept {x['accept_len']:.3f} | in vocabulary: steps {x['in_vocab_steps']:5d} "
                  f"first {x['in_vocab_first']:.3f} accept {x['in_vocab_accept_len']:.3f}")
    for name in ("mt_bench", "own"):
        miss = result["sets"][name]["confident_misses"]
        print(f"  {name}: first drafts missed where the target is >= 90% sure, by token: "
              + ", ".join(f"{x['text']!r} {x['missed']}/{x['steps']}" for x in miss[:15]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "acceptance_by_confidence.json").write_text(json.dumps(result, indent=1))
    plot(result, args.out / "acceptance_by_confidence.png")


if __name__ == "__main__":
    main()

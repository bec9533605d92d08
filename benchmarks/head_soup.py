"""Issue 13: do weight averages of EAGLE-3 heads from one lineage accept more than their parts?

    python benchmarks/head_soup.py --head M=DIR --head C=builtin:smollm2 --head D=DIR \\
        --mix C=1 --mix C=0.5,D=0.5 --mix M=0.5,C=0.5 --own 200 --seed 777 --out DIR [--write-best DIR]

Heads annealed from one another (run C from M, run D from C: same shapes, same draft vocabulary) sit in
one basin, where averaging their weights ("model soups") often lands lower than either end. Each
``--mix`` is a weighted average of the named heads' float tensors (the token maps must be equal), rounded to
the checkpoints' own dtype, i.e. exactly the head that would ship. Every mix is walked (the greedy S-step
chains of ``vocab_gain.chains``: in fp32 the engine's own accept lengths) over the target's greedy answers
to OUR OWN prompts (``build_prompts(--own, --seed, --prompt-set)``), which alone choose the best mix, then
over the evaluation sets, which only report. Writes ``head_soup.json``; ``--write-best`` writes the chosen
mix as a head folder (the first head's ``config.json`` and one ``model.safetensors``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import torch
from context_calibration import add_own_and_eval_args, own_answers  # siblings (benchmarks/)
from safetensors import safe_open
from safetensors.torch import save_file
from vocab_gain import answers, chains, load_heads, parse_sets

from updraft.heads import resolve_draft_path
from updraft.models.eagle import load_draft_head


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the head folder's safetensors files (one file or shards)."""
    out: dict[str, torch.Tensor] = {}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no .safetensors file")
    for f in files:
        with safe_open(str(f), "pt") as s:
            out.update({k: s.get_tensor(k) for k in s.keys()})
    return out


def parse_mix(text: str, names: set[str]) -> dict[str, float]:
    """``A=0.5,B=0.5`` -> weights (normalised to sum 1)."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, _, w = part.partition("=")
        if name not in names:
            raise ValueError(f"--mix {text!r}: {name!r} is not a --head name ({', '.join(sorted(names))})")
        try:
            mix[name] = float(w)
        except ValueError:
            raise ValueError(f"--mix {text!r}: weight {w!r} is not a number") from None
    total = sum(mix.values())
    if total <= 0:
        raise ValueError(f"--mix {text!r}: the weights must sum to more than 0")
    return {k: v / total for k, v in mix.items()}


def average(weights: dict[str, dict[str, torch.Tensor]], mix: dict[str, float]) -> dict[str, torch.Tensor]:
    """The mix of the heads' tensors: floats averaged in float64 and rounded to their dtype, the rest
    (token maps) required equal."""
    first = weights[next(iter(mix))]
    out: dict[str, torch.Tensor] = {}
    for key, ref in first.items():
        parts = {name: weights[name][key] for name in mix}
        if any(p.shape != ref.shape for p in parts.values()):
            raise ValueError(f"{key}: the heads' shapes differ ({ {n: tuple(p.shape) for n, p in parts.items()} })")
        if ref.is_floating_point():
            out[key] = sum(w * parts[n].double() for n, w in mix.items()).to(ref.dtype)
        elif all(torch.equal(p, ref) for p in parts.values()):
            out[key] = ref
        else:
            raise ValueError(f"{key}: the heads' {key} differ; only heads with one token map can be averaged")
    return out


def write_head(folder: Path, config: Path, tensors: dict[str, torch.Tensor]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(config, folder / "config.json")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head", action="append", required=True, help="NAME=FOLDER or NAME=builtin:X (repeat)")
    ap.add_argument("--mix", action="append", required=True, help="NAME=W,NAME=W (repeat; weights normalised)")
    add_own_and_eval_args(ap, 200, "own prompts that choose the mix")
    ap.add_argument("--write-best", type=Path, help="write the mix the own prompts chose here as a head folder")
    args = ap.parse_args()
    folders: dict[str, Path] = {}
    for spec in args.head:
        name, _, path = spec.partition("=")
        if not name or not path:
            raise ValueError(f"--head {spec!r}: expected NAME=FOLDER")
        folders[name] = Path(resolve_draft_path(path))
    mixes = {m: parse_mix(m, set(folders)) for m in args.mix}
    weights = {n: read_weights(f) for n, f in folders.items()}
    config = folders[next(iter(folders))] / "config.json"
    device = torch.device("cpu")
    engine, _, aux = load_heads(args.model, [str(folders[next(iter(folders))])], device)
    heads = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, mix) in enumerate(mixes.items()):
            write_head(Path(tmp) / str(i), config, average(weights, mix))
            heads[label] = load_draft_head(Path(tmp) / str(i), engine.model, torch.float32, device)
    sets = {"own": None, **parse_sets(args.sets)}
    result: dict[str, object] = dict(heads={n: str(f) for n, f in folders.items()}, mixes=mixes, own=args.own,
                                     seed=args.seed, prompt_set=args.prompt_set, steps=args.steps,
                                     max_tokens=args.max_tokens, sets={})
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name, n in sets.items():
        if n is None:
            data = own_answers(engine, args.own, args.seed, args.prompt_set, args.max_tokens, aux)
        else:
            data = answers(engine, name, n, args.max_tokens, aux)[0]
        table[name] = {label: chains(h, data, device, args.steps) for label, h in heads.items()}
        print(f"{name}: " + ", ".join(f"{label} {r['accept_len']:.3f} ({r['first']:.3f})"
                                      for label, r in table[name].items()), flush=True)
    best = max(table["own"], key=lambda label: table["own"][label]["accept_len"])
    result["sets"] = table
    result["best_on_own"] = best
    print(f"best on own prompts: {best}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "head_soup.json").write_text(json.dumps(result, indent=1))
    if args.write_best is not None:
        write_head(args.write_best, config, average(weights, mixes[best]))


if __name__ == "__main__":
    main()

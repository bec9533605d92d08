"""Acceptance of a draft head on the EAGLE evaluation sets, and its speed-up at batch size 1.

For a target and an EAGLE / EAGLE-3 head, over the eval sets (read in place from
../shared/data/eagle-eval through updraft.bench.prompts; never copied), greedy, chain of S drafts:

* acceptance: every prompt of the set (first turn, chat template) through the speculative
  engine: mean accept length (tokens per verify step, counting the bonus token), acceptance
  rate, per-position acceptance (verify steps whose draft k was accepted / verify steps) and the
  accept-length histogram; for a set whose rows carry a ``category`` (mt_bench), the accept
  length and per-position acceptance of each category's prompts;
* speed: the first ``--speed-prompts`` prompts of each set run one at a time (bs 1) through the
  speculative engine and through a plain engine on the same loaded target, in the same run:
  output tokens/s end to end and in decode, and whether the speculative output equals the plain
  greedy output (exactly lossless in fp32; in bf16 on GPU, near-ties may flip: reported as is).

Writes ``eval_acceptance.json`` (with GPU / torch / triton versions, commit, date) and
``per_position.png`` under ``--out``; ``--plot FILE.json`` redraws the PNG from a JSON (for a
machine without matplotlib). Example:

    python benchmarks/eval_acceptance.py --head builtin:smollm2 --limit mt_bench=80,default=20 \
        --max-tokens 256 --speed-prompts 8 --out benchmarks/results/DATE-h100/acceptance
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import safe_open

from updraft.bench.prompts import EVAL_SETS, load_prompt_rows
from updraft.config import EngineConfig, SpeculativeConfig
from updraft.engine.engine import Engine
from updraft.heads import resolve_draft_path
from updraft.models.loader import load_checkpoint
from updraft.models.resolve import resolve_model
from updraft.provenance import git_commit
from updraft.sampling_params import SamplingParams
from updraft.spec.stats import SpecStats

DEFAULT_LIMITS = "mt_bench=80,default=20"


def _limits(text: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        if name not in EVAL_SETS and name != "default":
            raise ValueError(f"--limit: unknown set {name!r}; sets: {', '.join(EVAL_SETS)}")
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"--limit: {part!r} is not NAME=N with N a whole number (0 = all)") from None
        out[name] = n if n > 0 else None
    return out


def parse_limits(text: str) -> dict[str, int | None]:
    """``sum=40`` -> per-set prompt limits (None = all). The sets ``text`` names take its limits; with a
    ``default=N`` in it every other set takes N, without one the others keep ``DEFAULT_LIMITS``."""
    given = _limits(text)
    base = {"default": given["default"]} if "default" in given else _limits(DEFAULT_LIMITS)
    return base | given


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)",
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    env["commit"] = git_commit()
    return env


def run_one(engine: Engine, ids: list[int], params: SamplingParams) -> dict[str, Any]:
    """One request alone (bs 1): output ids, wall time, decode time, spec counters."""
    t0 = time.perf_counter()
    req = engine.add_request(ids, params, detokenize=False)
    while engine.has_unfinished():
        engine.step()
    if engine.device.type == "cuda":
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    engine.release_finished(req.request_id)
    if req.error:
        raise RuntimeError(f"request failed: {req.error}")
    first = req.first_token_time or t1
    return {"ids": list(req.output_ids), "wall_s": t1 - t0, "decode_s": max(0.0, (req.finish_time or t1) - first), "spec": req.spec}


def run_batch(engine: Engine, prompts: list[list[int]], params: SamplingParams) -> tuple[list[list[int]], list[SpecStats]]:
    """The prompts together: each one's output ids and speculation counters, in prompt order."""
    reqs = [engine.add_request(p, params, detokenize=False) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    for r in reqs:
        engine.release_finished(r.request_id)
        if r.error:
            raise RuntimeError(f"request failed: {r.error}")
    return [list(r.output_ids) for r in reqs], [r.spec for r in reqs]


def by_category(categories: list[str | None], per_request: list[SpecStats]) -> dict[str, dict[str, Any]]:
    """Accept length and per-position acceptance of each category's prompts (``{}`` where the set
    has no categories): which kinds of prompts hold a set's figure down."""
    groups: dict[str, SpecStats] = {}
    counts: dict[str, int] = {}
    for cat, st in zip(categories, per_request, strict=True):
        if cat is None:
            continue
        groups.setdefault(cat, SpecStats()).merge(st)
        counts[cat] = counts.get(cat, 0) + 1
    return {cat: {"prompts": counts[cat], "mean_accept_length": st.mean_accept_length,
                  "per_position": st.per_position_rate(), "verify_steps": st.num_drafts}
            for cat, st in sorted(groups.items())}


def histogram(stats: SpecStats, steps: int) -> list[int]:
    pos = list(stats.accepted_per_pos) + [0] * (steps - len(stats.accepted_per_pos))
    at_least = [stats.num_drafts] + pos
    return [at_least[k] - (at_least[k + 1] if k + 1 < len(at_least) else 0) for k in range(steps + 1)]


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def draft_vocab(head: str) -> set[int] | None:
    """The target ids an EAGLE-3 head can draft (``arange + d2t``), or None for a head that drafts
    the whole vocabulary."""
    for f in sorted(Path(head).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            if "d2t" in sf.keys():
                d2t = sf.get_tensor("d2t").long()
                return set((torch.arange(d2t.numel()) + d2t).tolist())
    return None


class Setup(NamedTuple):
    """What every set is run with: the plain and speculative engines over one loaded target (the
    EAGLE-3 head's aux layers switched on only for the speculative one), the sampling
    parameters and the head's draft vocabulary (None: the full one)."""

    args: argparse.Namespace
    base: Engine
    spec: Engine
    loaded: Any
    aux: tuple[int, ...]
    params: SamplingParams
    vocab: set[int] | None


def build_setup(args: argparse.Namespace) -> tuple[Setup, dict[str, Any]]:
    """The engines (both warmed up) and the run's description for the results."""
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else ("cpu" if args.device == "auto" else args.device))
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    dname = str(dtype).removeprefix("torch.")
    head = resolve_draft_path(args.head)
    head_cfg = json.loads((Path(head) / "config.json").read_text())
    method = args.method or ("eagle3" if "LlamaForCausalLMEagle3" in head_cfg.get("architectures", []) else "eagle")
    loaded = load_checkpoint(resolve_model(args.model), dtype=dtype, device=device, progress=False)
    kv = args.max_total_tokens or (65536 if device.type == "cuda" else 16384)
    common = dict(model=str(loaded.source), device=device.type, dtype=dname, progress=False, max_total_tokens=kv)
    # The plain engine first (captured before an EAGLE-3 head switches on the aux layers).
    base = Engine(EngineConfig(**common, max_running_requests=1, cuda_graph_bs=[1]), loaded=loaded)
    spec_cfg = SpeculativeConfig(method=method, draft_model=head, num_steps=args.num_steps, adaptive=not args.pin_steps,
                                 draft_lm_head=args.draft_lm_head, ngram_assist=args.ngram_assist,
                                 context_vocab=args.context_vocab if method == "eagle3" else 0)
    bs = args.accept_batch
    spec = Engine(EngineConfig(**common, max_running_requests=bs, cuda_graph_max_bs=bs, speculative=spec_cfg), loaded=loaded)
    st = Setup(args, base, spec, loaded, loaded.model.aux_layers,
               SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens), draft_vocab(head))
    warm = base.tokenizer.encode_chat([{"role": "user", "content": "Say hello."}])
    for eng in (base, spec):  # compile / warm both paths before timing
        loaded.model.aux_layers = st.aux if eng is spec else ()
        run_one(eng, warm, SamplingParams(temperature=0.0, max_tokens=16))
    described = {
        "environment": environment(), "target": str(args.model), "head": args.head, "head_path": head,
        "method": method, "num_steps": args.num_steps, "draft_lm_head": args.draft_lm_head,
        "ngram_assist": args.ngram_assist, "context_vocab": spec_cfg.context_vocab, "temperature": args.temperature, "top_p": args.top_p, "dtype": dname,
        "max_tokens": args.max_tokens, "accept_batch": bs, "engine_graphs": {"spec": spec.graph_log, "base": base.graph_log},
    }
    return st, described


def speed_pairs(st: Setup, prompts: list[list[int]]) -> tuple[dict[str, Any], list[SpecStats], list[int], list[int]]:
    """``prompts`` one at a time through the plain and the speculative engine: (token and time
    sums, each speculative request's stats, the speculative output tokens, the first divergence
    from the plain output of each request whose outputs differ)."""
    speed = {"spec_tokens": 0, "spec_wall_s": 0.0, "spec_decode_s": 0.0, "base_tokens": 0, "base_wall_s": 0.0,
             "base_decode_s": 0.0}
    per_request: list[SpecStats] = []
    emitted: list[int] = []
    diverge: list[int] = []
    for p in prompts:
        st.loaded.model.aux_layers = ()
        b = run_one(st.base, p, st.params)
        st.loaded.model.aux_layers = st.aux
        s = run_one(st.spec, p, st.params)
        emitted += s["ids"]
        per_request.append(s["spec"])
        speed["spec_tokens"] += len(s["ids"])
        speed["base_tokens"] += len(b["ids"])
        for k in ("wall_s", "decode_s"):
            speed[f"spec_{k}"] += s[k]
            speed[f"base_{k}"] += b[k]
        d = first_divergence(s["ids"], b["ids"])
        if d is not None:
            diverge.append(d)
    st.loaded.model.aux_layers = st.aux
    return speed, per_request, emitted, diverge


def speed_entry(speed: dict[str, Any], compared: int, diverge: list[int]) -> dict[str, Any]:
    """The set's bs-1 speed fields: tokens/s end to end and in decode, spec and plain, and how
    many outputs were equal."""
    e2e_s = speed["spec_tokens"] / max(speed["spec_wall_s"], 1e-9)
    e2e_b = speed["base_tokens"] / max(speed["base_wall_s"], 1e-9)
    dec_s = speed["spec_tokens"] / max(speed["spec_decode_s"], 1e-9)
    dec_b = speed["base_tokens"] / max(speed["base_decode_s"], 1e-9)
    return {
        "speed_bs1": speed | {
            "spec_tok_s": e2e_s, "base_tok_s": e2e_b, "speedup": e2e_s / e2e_b,
            "spec_decode_tok_s": dec_s, "base_decode_tok_s": dec_b, "decode_speedup": dec_s / dec_b,
        },
        "outputs_equal": compared - len(diverge),
        "outputs_compared": compared,
        "first_divergence": diverge,
    }


def evaluate_set(st: Setup, name: str, limit: int) -> dict[str, Any]:
    """One set: its prompts that fit, the first ``--speed-prompts`` side by side at bs 1, the rest
    through the speculative engine in batches; acceptance over all of them."""
    t_set = time.perf_counter()
    rows = load_prompt_rows(name, limit)
    prompts = [st.spec.tokenizer.encode_chat([{"role": "user", "content": r.text}]) for r in rows]
    limit_ctx = min(st.base.max_model_len, st.spec.max_model_len) - st.args.max_tokens - 8
    kept_rows = [(p, r.category) for p, r in zip(prompts, rows, strict=True) if len(p) < limit_ctx]
    kept = [p for p, _ in kept_rows]
    n_speed = min(st.args.speed_prompts, len(kept))
    speed, per_request, emitted, diverge = speed_pairs(st, kept[:n_speed])  # per_request: in the order of ``kept``
    rest = kept[n_speed:]
    for i in range(0, len(rest), 256):
        outs, sts = run_batch(st.spec, rest[i : i + 256], st.params)
        emitted += [t for o in outs for t in o]
        per_request += sts
    stats = SpecStats()
    for r in per_request:
        stats.merge(r)
    vocab = st.vocab
    entry: dict[str, Any] = {
        "prompts": len(kept),
        "skipped_too_long": len(prompts) - len(kept),
        "mean_accept_length": stats.mean_accept_length,
        "acceptance_rate": stats.acceptance_rate,
        "per_position": stats.per_position_rate(),
        "accept_length_histogram": histogram(stats, st.args.num_steps),
        "verify_steps": stats.num_drafts,
        "draft_vocab_coverage": None if vocab is None else sum(t in vocab for t in emitted) / max(len(emitted), 1),
        "speed_prompts": n_speed,
        "by_category": by_category([c for _, c in kept_rows], per_request),
    }
    if n_speed:
        entry |= speed_entry(speed, n_speed, diverge)
    entry["wall_s"] = time.perf_counter() - t_set
    return entry


def print_set(name: str, entry: dict[str, Any], has_vocab: bool) -> None:
    sp = entry.get("speed_bs1", {})
    print(
        f"{name:10s} n={entry['prompts']:3d} accept length {entry['mean_accept_length']:.2f} "
        f"per position {[round(x, 2) for x in entry['per_position']]}"
        + (f" | in draft vocab {entry['draft_vocab_coverage']:.3f}" if has_vocab else "")
        + (f" | bs1 {sp['spec_tok_s']:.0f} vs {sp['base_tok_s']:.0f} tok/s = {sp['speedup']:.2f}x, "
           f"equal {entry['outputs_equal']}/{entry['outputs_compared']}" if sp else "")
        + f" | {entry['wall_s']:.0f}s",
        flush=True,
    )
    if entry["by_category"]:
        print("           " + ", ".join(f"{c} {v['mean_accept_length']:.2f}" for c, v in entry["by_category"].items()),
              flush=True)


def evaluate(args: argparse.Namespace, results: dict[str, Any]) -> dict[str, Any]:
    """Fill ``results`` set by set (so an interrupted run keeps the sets it finished)."""
    limits = parse_limits(args.limit)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    bad = [s for s in sets if s not in EVAL_SETS]
    if bad:
        raise ValueError(f"--sets: unknown {bad[0]!r}; sets: {', '.join(EVAL_SETS)}")
    st, described = build_setup(args)
    results |= described | {"sets": {}}
    t_all = time.perf_counter()
    for name in sets:
        results["sets"][name] = entry = evaluate_set(st, name, limits.get(name, limits["default"]))
        results["wall_s"] = time.perf_counter() - t_all
        print_set(name, entry, st.vocab is not None)
    return results


def plot(results: dict[str, Any], path: Path) -> bool:
    """Per-position acceptance per set (left) and the accept-length histogram (right)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (redraw later with --plot FILE.json)", file=sys.stderr)
        return False
    sets = {k: v for k, v in results["sets"].items() if v["verify_steps"]}
    steps = results["num_steps"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(sets))
    for i, (name, e) in enumerate(sets.items()):
        xs = [k + 1 + (i - (len(sets) - 1) / 2) * width for k in range(steps)]
        pp = list(e["per_position"]) + [0.0] * (steps - len(e["per_position"]))
        a.bar(xs, pp, width, label=f"{name} (τ={e['mean_accept_length']:.2f})")
        hist = e["accept_length_histogram"]
        total = max(1, sum(hist))
        b.plot(range(1, steps + 2), [h / total for h in hist], marker="o", label=name)
    a.set_xlabel("draft position k")
    a.set_ylabel("share of verify steps with draft k accepted")
    a.set_xticks(range(1, steps + 1))
    a.set_ylim(0, 1)
    a.legend(fontsize=8)
    b.set_xlabel("accept length (tokens per verify step, incl. bonus)")
    b.set_ylabel("share of verify steps")
    b.legend(fontsize=8)
    env = results["environment"]
    fig.suptitle(f"{results['head']} on {results['target']}: greedy chain S={steps}, {results['dtype']}, {env['device']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default", help="target model (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--head", default="builtin:smollm2", help="draft head folder or builtin:NAME")
    ap.add_argument("--method", choices=["eagle", "eagle3"], help="default: from the head's config")
    ap.add_argument("--sets", default=",".join(EVAL_SETS), help=f"comma-separated eval sets ({', '.join(EVAL_SETS)})")
    ap.add_argument("--limit", default="", help=f"prompts per set: NAME=N,...,default=N (0 = all), over {DEFAULT_LIMITS}")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--num-steps", type=int, default=5, help="draft steps S (chain)")
    ap.add_argument("--adaptive", dest="pin_steps", action="store_false", default=True,
                    help="let adaptive speculation choose S per iteration (default: S pinned to --num-steps, the head's acceptance along the chain)")
    ap.add_argument("--speed-prompts", type=int, default=8, help="prompts per set timed at bs 1 with and without speculation")
    ap.add_argument("--accept-batch", type=int, default=16, help="batch size of the remaining acceptance prompts")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--max-total-tokens", type=int, default=None, help="KV pool of each engine in tokens (default 65536 on CUDA, 16384 on CPU)")
    ap.add_argument("--threads", type=int, default=None, help="CPU: torch threads")
    ap.add_argument("--draft-lm-head", default="auto", choices=["auto", "fp8", "model"],
                    help="EAGLE-3 draft LM head weights (SpeculativeConfig.draft_lm_head)")
    ap.add_argument("--ngram-assist", type=int, default=SpeculativeConfig.ngram_assist,
                    help="n-gram lookups replace the head's drafts where the history repeats this many tokens (0: the head alone)")
    ap.add_argument("--context-vocab", type=int, default=SpeculativeConfig.context_vocab,
                    help="EAGLE-3: prompt tokens outside the draft vocabulary that greedy drafts may propose (0: off)")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sampling temperature of every request (default 0: greedy, the head's goals; > 0: the "
                         "acceptance of lossless rejection sampling, and outputs_equal means nothing)")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="folder for eval_acceptance.json and per_position.png")
    ap.add_argument("--plot", default=None, help="only redraw the PNG from this JSON (into --out, default: beside it)")
    args = ap.parse_args(argv)
    if args.plot:
        res = json.loads(Path(args.plot).read_text())
        folder = Path(args.out) if args.out else Path(args.plot).parent
        folder.mkdir(parents=True, exist_ok=True)
        return 0 if plot(res, folder / "per_position.png") else 1
    if args.threads:
        torch.set_num_threads(args.threads)
    res: dict[str, Any] = {}
    status = 0
    try:
        evaluate(args, res)
    except KeyboardInterrupt:  # e.g. a timeout's SIGINT: keep the sets that finished
        res["interrupted"] = True
        status = 130
        print("interrupted: writing the sets that finished", file=sys.stderr)
    out = Path(args.out) if args.out else None
    if out is not None and res.get("sets"):
        out.mkdir(parents=True, exist_ok=True)
        (out / "eval_acceptance.json").write_text(json.dumps(res, indent=2) + "\n")
        plot(res, out / "per_position.png")
    summary = {k: round(v["mean_accept_length"], 3) for k, v in res.get("sets", {}).items()}
    print(f"mean accept length per set: {summary} ({res.get('wall_s', 0):.0f}s)")
    return status


if __name__ == "__main__":
    sys.exit(main())

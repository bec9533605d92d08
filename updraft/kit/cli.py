"""``updraft kit run`` (the attention matrix), ``updraft kit report`` (merge partial runs) and
``updraft kit mutate`` (the mutation campaign).

Exit status of ``kit run``: 0 when every failing cell is listed in docs/KNOWN_FAILURES.md, 1 when
any is not (a regression), 2 on bad arguments. ``kit mutate``: 0 when every mutation that ran was
killed, 1 when one survived or could not be applied.

Device: ``auto`` is cuda when available. On cpu, ``TRITON_INTERPRET=1`` is set (unless the caller
set it) before triton is imported, so the triton backend runs under the interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path


def add_kit_parser(sub: argparse._SubParsersAction) -> None:
    """The ``kit`` subcommand and its ``run`` / ``mutate`` subcommands (no heavy imports)."""
    kit = sub.add_parser("kit", help="attention test kit: the backend matrix and the mutation campaign")
    ksub = kit.add_subparsers(dest="kit_command", required=True)

    run = ksub.add_parser("run", help="run the attention matrix and write it as markdown")
    run.add_argument("--backend", action="append", help="backend (repeatable; default: torch_native, triton, flex, mla)")
    run.add_argument("--mode", action="append",
                     help="forward mode (EXTEND, DECODE, ...) or production column ('draft decode', 'draft chain', "
                          "'draft extend v1', 'draft extend v2', 'verify', 'fused iteration'); repeatable; default: all")
    run.add_argument("--runner", action="append", help="eager, graph-metadata, graph or production (repeatable; default: all)")
    run.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="default: auto (cuda if available)")
    run.add_argument("--quick", action="store_true", help="the covering CI subset (default: the full matrix)")
    run.add_argument("--jobs", type=int, default=None, help="worker processes (default: 2 on cpu, 1 on cuda)")
    run.add_argument("--out", default=None,
                     help="markdown output; '-' for stdout (default: docs/attention-matrix.md for the full matrix on "
                          "cpu, docs/attention-matrix-cuda.md on cuda; --quick writes nothing unless asked)")
    run.add_argument("--known", default=None, help="known failures (default: docs/KNOWN_FAILURES.md)")
    run.add_argument("--json", default=None, help="also write the raw matrix as JSON (for `kit report`)")
    run.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    run.set_defaults(func=cmd_kit_run)

    rep = ksub.add_parser("report", help="merge JSON matrices of partial runs (e.g. one backend each) into one markdown")
    rep.add_argument("inputs", nargs="+", help="JSON files written by `kit run --json`")
    rep.add_argument("--out", default="docs/attention-matrix.md", help="markdown output")
    rep.add_argument("--known", default=None, help="known failures (default: docs/KNOWN_FAILURES.md)")
    rep.set_defaults(func=cmd_kit_report)

    mut = ksub.add_parser("mutate", help="the mutation campaign (temporary copies; the tree is not touched)")
    mut.add_argument("--only", action="append", help="mutation name (repeatable; default: all)")
    mut.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"),
                     help="cpu (default): the emulator; cuda: the GPU-only mutations (all with --all)")
    mut.add_argument("--all", action="store_true", help="with --device cuda: every mutation, not only the GPU-only ones")
    mut.add_argument("--jobs", type=int, default=2, help="mutations at a time (default 2)")
    mut.add_argument("--timeout", type=float, default=600.0, help="seconds per target (default 600)")
    mut.add_argument("--out", default="docs/MUTATIONS.md", help="markdown output (default: docs/MUTATIONS.md)")
    mut.add_argument("--list", action="store_true", help="list the mutations and exit")
    mut.set_defaults(func=cmd_kit_mutate)


def _device(name: str) -> str:
    if name == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def _prepare_device(device: str) -> None:
    if device == "cpu":
        # Must happen before triton is imported (kernels are defined at import).
        os.environ.setdefault("TRITON_INTERPRET", "1")
        from updraft.ops.interpreter import install

        install()  # one triton.language patch per launch (see there); the workers install their own
    elif device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda but no CUDA GPU is available")


def _command_line(args: argparse.Namespace) -> str:
    argv = getattr(args, "argv", None)
    if argv is None:
        argv = sys.argv[1:]
    return "updraft " + " ".join(shlex.quote(a) for a in argv)


def cmd_kit_run(args: argparse.Namespace) -> int:
    device = _device(args.device)
    _prepare_device(device)
    from updraft.kit import report
    from updraft.kit.matrix import BACKENDS, run_matrix, select_columns

    backends = args.backend or list(BACKENDS)
    bad = [b for b in backends if b not in BACKENDS]
    if bad:
        raise ValueError(f"unknown backend {bad[0]!r}; choose from {', '.join(BACKENDS)}")
    columns = select_columns(args.mode, args.runner)
    if not columns:
        raise ValueError("no column matches --mode / --runner")
    # CPU: one worker per core (2 on CI). CUDA: the cases are tiny and Python-bound, so a few
    # workers (each its own CUDA context) share the GPU; kernels compile into the shared caches.
    jobs = args.jobs if args.jobs is not None else min(2 if device == "cpu" else 4, os.cpu_count() or 1)
    tier = "quick" if args.quick else "full"
    known = report.load_known(Path(args.known) if args.known else report.default_known_path())
    env = report.environment(device, _command_line(args))
    result = run_matrix(backends, columns, device, tier, jobs=jobs, progress=args.progress)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.to_json(result, env), indent=1), encoding="utf-8")
    out = args.out
    if out is None and tier == "full":
        out = "docs/attention-matrix.md" if device == "cpu" else "docs/attention-matrix-cuda.md"
    return _finish(result, env, known, out)


def _finish(result, env: dict[str, str], known: list, out: str | None) -> int:  # noqa: ANN001 - MatrixResult
    from updraft.kit import report
    from updraft.kit.matrix import apply_known

    stale = apply_known(result, known)
    text = report.render(result, env, stale)
    if out == "-":
        sys.stdout.write(text)
    elif out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")
    for line in report.summary_lines(result):
        print(line)
    if out and out != "-":
        print(f"wrote {out}")
    return 1 if result.regressions() else 0


def cmd_kit_report(args: argparse.Namespace) -> int:
    from updraft.kit import report

    parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.inputs]
    result, env = report.merge_json(parts)
    known = report.load_known(Path(args.known) if args.known else report.default_known_path())
    return _finish(result, env, known, args.out)


def cmd_kit_mutate(args: argparse.Namespace) -> int:
    from updraft.kit import mutate
    from updraft.kit.mutations import MUTATIONS, by_name

    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:34} class {m.failure_class:>2}  {m.device:3}  {m.what}")
            for t in m.targets:
                print(f"{'':40}-> {t}")
        return 0
    device = _device(args.device)
    _prepare_device(device)
    chosen = by_name(args.only)
    if device == "cuda" and not args.only and not args.all:
        chosen = [m for m in chosen if m.device == "gpu"]
    problems = mutate.anchor_problems(chosen)
    if problems:
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 1

    def show(r: mutate.MutationResult) -> None:
        extra = r.killed_by or r.detail
        print(f"{r.status:9} {r.mutation.name:34} {r.seconds:6.1f}s  {extra[:150]}", flush=True)

    results = mutate.run_campaign(chosen, device, jobs=args.jobs, timeout=args.timeout,
                                  include_gpu=device == "cuda", on_result=show)
    from updraft.kit import report

    env = report.environment(device, _command_line(args))
    env.pop("flex", None)
    if args.out and args.out != "-":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(mutate.render(results, env), encoding="utf-8")
        print(f"wrote {args.out}")
    ran = [r for r in results if r.status != "not run"]
    killed = sum(r.status == "killed" for r in ran)
    print(f"{killed}/{len(ran)} mutations killed")
    return 0 if killed == len(ran) else 1


def kit_main(argv: list[str]) -> int:
    """``updraft kit ...`` without the rest of the CLI (tests call this: same code path)."""
    parser = argparse.ArgumentParser(prog="updraft")
    sub = parser.add_subparsers(dest="command", required=True)
    add_kit_parser(sub)
    args = parser.parse_args(["kit", *argv])
    args.argv = ["kit", *argv]
    return int(args.func(args))

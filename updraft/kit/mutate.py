"""The mutation campaign: apply each mutation to a temporary COPY of the repository (``updraft/``,
``tests/``, ``pyproject.toml``, ``docs/KNOWN_FAILURES.md``), run its targets there with the copy
first on ``PYTHONPATH``, and record whether a target failed (killed) or all passed (survived).

The real tree is never written. Mutations run in parallel (threads, each driving subprocesses),
each in its own copy; a mutated file that does not compile, an anchor that is missing or not
unique, and a target that cannot run (no tests collected, bad arguments) are errors, never
kills.
"""

from __future__ import annotations

import os
import py_compile
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from updraft.kit.mutations import Mutation

REPO = Path(__file__).resolve().parents[2]
COPIED = ("updraft", "tests", "pyproject.toml", "docs/KNOWN_FAILURES.md")
#: pytest exit codes that mean "the tests ran and something failed" (1) or "could not even
#: import / collect under the mutation" (2: interrupted, e.g. a collection error).
PYTEST_KILL = (1, 2)


@dataclass
class MutationResult:
    mutation: Mutation
    status: str  # killed | survived | error | not run
    killed_by: str = ""
    seconds: float = 0.0
    detail: str = ""


def anchor_problems(mutations: list[Mutation], root: Path = REPO) -> list[str]:
    """Anchors that are missing or not unique in ``root`` (empty when every mutation applies)."""
    problems = []
    for m in mutations:
        for e in m.edits:
            path = root / e.file
            if not path.is_file():
                problems.append(f"{m.name}: {e.file} does not exist")
                continue
            n = path.read_text(encoding="utf-8").count(e.anchor)
            if n != 1:
                problems.append(f"{m.name}: anchor found {n} times in {e.file}: {e.anchor.strip()[:60]!r}")
    return problems


def make_copy(dst: Path, root: Path = REPO) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for rel in COPIED:
        src = root / rel
        if src.is_dir():
            shutil.copytree(src, dst / rel, ignore=ignore)
        elif src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def apply_mutation(m: Mutation, root: Path) -> None:
    """Apply ``m``'s edits to the copy at ``root``; raise ValueError if an anchor is not unique
    or a mutated file no longer compiles."""
    for e in m.edits:
        path = root / e.file
        text = path.read_text(encoding="utf-8")
        n = text.count(e.anchor)
        if n != 1:
            raise ValueError(f"anchor found {n} times in {e.file}: {e.anchor.strip()[:60]!r}")
        path.write_text(text.replace(e.anchor, e.replacement), encoding="utf-8")
    for f in m.files:
        try:
            py_compile.compile(str(root / f), doraise=True)
        except py_compile.PyCompileError as exc:
            raise ValueError(f"mutated {f} does not compile: {exc.msg.strip().splitlines()[-1]}") from None


def child_env(root: Path, device: str, threads: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["OMP_NUM_THREADS"] = str(threads)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def check_isolation(root: Path, device: str) -> None:
    """The copy must be what ``import updraft`` finds from there (not the installed tree)."""
    out = subprocess.run(
        [sys.executable, "-c", "import updraft, sys; sys.stdout.write(updraft.__file__)"],
        cwd=root, env=child_env(root, device), capture_output=True, text=True, timeout=120,
    )
    where = Path(out.stdout.strip() or "?").resolve()
    if root.resolve() not in where.parents:
        raise RuntimeError(f"the mutation copy is not imported first: updraft comes from {where} ({out.stderr[-300:]})")


def target_command(target: str, root: Path, device: str) -> list[str]:
    if target.startswith("kit "):
        return [sys.executable, "-m", "updraft.cli", "kit", "run", "--quick", "--device", device, "--jobs", "1",
                "--no-progress", "--out", str(root / "kit-matrix.md"), *shlex.split(target[4:])]
    return [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", *shlex.split(target)]


def _first(lines: list[str], prefixes: tuple[str, ...]) -> str:
    for line in lines:
        if line.startswith(prefixes):
            return line
    return ""


def run_target(target: str, root: Path, device: str, timeout: float) -> tuple[str, str]:
    """(verdict, detail): verdict 'killed', 'survived' or 'error'."""
    cmd = target_command(target, root, device)
    try:
        proc = subprocess.run(cmd, cwd=root, env=child_env(root, device), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "killed", f"timeout after {timeout:.0f}s"
    lines = (proc.stdout + "\n" + proc.stderr).splitlines()
    if target.startswith("kit "):
        if proc.returncode == 0:
            return "survived", ""
        if proc.returncode == 1:
            hit = _first(lines, ("[REGRESSION]",)).removeprefix("[REGRESSION] ")
            return "killed", hit[:160] or "kit run failed"
        return "error", f"kit exited {proc.returncode}: {(lines or [''])[-1][:200]}"
    if proc.returncode == 0:
        return "survived", ""
    if proc.returncode in PYTEST_KILL:
        # An ERROR (set-up / collection) counts as a kill but says so: targets must not depend on
        # anything the machine may lack (network, model files), or a kill proves nothing.
        hit = _first(lines, ("FAILED ",)) or _first(lines, ("ERROR ",))
        return "killed", hit[:160] or f"pytest exited {proc.returncode}: {_first(lines, ('E ',))[:120]}"
    return "error", f"pytest exited {proc.returncode}: {' / '.join(lines[-3:])[:200]}"


def run_mutation(m: Mutation, device: str, timeout: float, root: Path = REPO) -> MutationResult:
    """Copy, mutate, run the targets in order until one kills the mutation."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"updraft-mut-{m.name}-") as tmp:
        copy = Path(tmp)
        make_copy(copy, root)
        try:
            apply_mutation(m, copy)
        except ValueError as exc:
            return MutationResult(m, "error", "", time.perf_counter() - t0, str(exc))
        errors = []
        for target in m.targets:
            verdict, detail = run_target(target, copy, device, timeout)
            if verdict == "killed":
                return MutationResult(m, "killed", f"{target} -> {detail}", time.perf_counter() - t0)
            if verdict == "error":
                errors.append(f"{target}: {detail}")
        status = "error" if errors and len(errors) == len(m.targets) else "survived"
        return MutationResult(m, status, "", time.perf_counter() - t0, "; ".join(errors))


def run_campaign(
    mutations: list[Mutation],
    device: str,
    *,
    jobs: int = 2,
    timeout: float = 600.0,
    include_gpu: bool = False,
    on_result: Callable[[MutationResult], None] | None = None,
    root: Path = REPO,
) -> list[MutationResult]:
    """Every mutation (GPU-only ones are 'not run' on CPU unless ``include_gpu``), ``jobs`` at a
    time. Results come back in the order of ``mutations``."""
    results: dict[str, MutationResult] = {}
    todo = []
    for m in mutations:
        if m.device == "gpu" and device == "cpu" and not include_gpu:
            results[m.name] = MutationResult(m, "not run", "", 0.0, "GPU only: run with --device cuda")
        else:
            todo.append(m)
    if todo:
        with tempfile.TemporaryDirectory(prefix="updraft-mut-check-") as tmp:
            make_copy(Path(tmp), root)
            check_isolation(Path(tmp), device)

    def one(m: Mutation) -> MutationResult:
        r = run_mutation(m, device, timeout, root)
        if on_result is not None:
            on_result(r)
        return r

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for r in pool.map(one, todo):
            results[r.mutation.name] = r
    return [results[m.name] for m in mutations]


def render(results: list[MutationResult], env: dict[str, str]) -> str:
    """docs/MUTATIONS.md."""
    killed = sum(r.status == "killed" for r in results)
    ran = [r for r in results if r.status != "not run"]
    lines = [
        "# Mutation campaign",
        "",
        "Each mutation reintroduces one bug (failure classes 1-11 of `../shared/design/spec-decoding.md`,",
        "then the kit's own list) as an exact search/replace on a temporary copy of `updraft/` and",
        "`tests/`, and runs the targets that should catch it (`updraft kit run --quick ...` subsets or",
        "named pytest tests, `-x`), in order, until one fails. Generated by `updraft kit mutate`; the",
        "mutations are data in `updraft/kit/mutations.py`.",
        "",
        "| | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in env.items()],
        f"| result | {killed}/{len(ran)} killed" + (f", {len(results) - len(ran)} not run (GPU only)" if len(ran) < len(results) else "") + " |",
        "",
        "| mutation | class | file | what changed | result | killed by | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        m = r.mutation
        by = r.killed_by.replace("|", "/") if r.killed_by else (r.detail.replace("|", "/")[:160] if r.detail else "")
        result = {"killed": "killed", "survived": "**survived**", "error": "**error**", "not run": "GPU only: not run"}[r.status]
        files = ", ".join(f"`{f}`" for f in m.files)
        lines.append(f"| `{m.name}` | {m.failure_class} | {files} | {m.what} | {result} | {by} | {r.seconds:.0f} |")
    lines += [
        "",
        "## Reproduce",
        "",
        "```bash",
        ".venv/bin/updraft kit mutate                        # the CPU campaign (2 at a time), writes docs/MUTATIONS.md",
        ".venv/bin/updraft kit mutate --only c10-padded-slots-stale --out /tmp/m.md   # one mutation",
        ".venv/bin/updraft kit mutate --list                 # names, classes and targets",
        "updraft kit mutate --device cuda --out docs/MUTATIONS-h100.md   # on the GPU: the GPU-only mutations",
        "updraft kit mutate --device cuda --all --out docs/MUTATIONS-h100.md   # on the GPU: every mutation",
        "```",
        "",
        "GPU-only mutations are run on the device (`--device cuda`); the H100 results are in",
        "[MUTATIONS-h100.md](MUTATIONS-h100.md) when present.",
        "",
        "A mutation's targets are listed in `updraft/kit/mutations.py`; `kit ...` targets run",
        "`updraft kit run --quick --device <device> --jobs 1 ...` in the copy, pytest targets run",
        "`python -m pytest -x -q ...` there. `tests/kit/test_mutations.py` checks on every CI run that",
        "every anchor still matches exactly once and that a few representative mutations are killed.",
        "",
        "## Patches",
        "",
    ]
    for r in results:
        m = r.mutation
        lines.append(f"`{m.name}` (targets: {'; '.join(f'`{t}`' for t in m.targets)})")
        lines.append("```diff")
        for e in m.edits:
            lines.append(f"# {e.file}")
            lines += [f"-{line}" for line in e.anchor.rstrip("\n").splitlines()]
            lines += [f"+{line}" for line in e.replacement.rstrip("\n").splitlines()]
        lines += ["```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"

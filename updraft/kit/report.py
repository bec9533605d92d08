"""The matrix as markdown (docs/attention-matrix.md), the environment header, and
docs/KNOWN_FAILURES.md ("anything failing that is not listed here is a regression").

KNOWN_FAILURES.md holds one markdown table with the columns ``backend | device | column |
status | root cause``; ``*`` (or ``any`` for the device) matches everything. Rows whose first cell
is empty or starts with ``(`` are ignored (placeholders).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

from updraft.kit.matrix import Cell, KnownFailure, MatrixResult

REPO = Path(__file__).resolve().parents[2]
KNOWN_COLUMNS = ("backend", "device", "column", "status", "root cause")


def load_known(path: Path | None) -> list[KnownFailure]:
    """Entries of KNOWN_FAILURES.md (none when the file is missing)."""
    if path is None or not path.is_file():
        return []
    out: list[KnownFailure] = []
    header: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line.startswith("|"):
            header = None if not line else header
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(line) <= set("|-: "):
            continue
        if [h for h in header if h] != list(KNOWN_COLUMNS):
            raise ValueError(f"{path}: the known-failures table must have the columns {' | '.join(KNOWN_COLUMNS)}")
        if not cells[0] or cells[0].startswith("("):
            continue
        row = dict(zip(header, cells))
        out.append(KnownFailure(row["backend"].strip("`"), row["device"].strip("`"), row["column"].strip("`"),
                                row["status"], row["root cause"]))
    return out


def default_known_path() -> Path:
    """docs/KNOWN_FAILURES.md of the working directory's repo, else of the package's repo."""
    here = Path("docs/KNOWN_FAILURES.md")
    return here if here.is_file() else REPO / "docs" / "KNOWN_FAILURES.md"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def environment(device: str, command: str) -> dict[str, str]:
    """What the header reports: device, versions, commit, date, command."""
    import torch

    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        dev = f"cuda: {name} (CUDA {torch.version.cuda}); graphs are real CUDA graphs"
    else:
        cpu = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        dev = f"cpu: {cpu} ({os.cpu_count()} cores); graphs are the CPU graph emulator"
    try:
        import triton

        from updraft.attention.triton_kernels import interpreting

        tri = f"{triton.__version__}" + (" (interpreter: TRITON_INTERPRET=1)" if interpreting() else "")
    except ImportError:
        tri = "not installed"
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    flex = "compiled (torch.compile)" if device == "cuda" or os.environ.get("UPDRAFT_FLEX_COMPILE") == "1" else "eager (unfused, exact; ignores the block mask)"
    return {
        "device": dev,
        "torch": torch.__version__,
        "triton": tri,
        "flex": flex,
        "python": platform.python_version(),
        "commit": commit + (" + uncommitted changes" if dirty else ""),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": f"`{command}`",
    }


def cell_text(cell: Cell, refs: dict[str, int], failures: list[Cell]) -> str:
    """``✓ (n)``, ``✗ f/n [Fk]``, ``— [k]``, ``blocked: reason``, ``skip: hardware [k]``."""
    if cell.status == "pass":
        return f"✓ ({cell.total})"
    if cell.status == "none":
        return f"— [{_ref(refs, cell.reason)}]"
    if cell.status == "skip":
        return f"skip: hardware [{_ref(refs, cell.reason)}]"
    failures.append(cell)
    tag = f"F{len(failures)}"
    known = " known" if cell.known else ""
    if cell.status == "blocked":
        short = cell.reason if len(cell.reason) <= 40 else cell.reason[:37] + "..."
        return f"blocked: {short.replace('|', '/')} [{tag}{known}]"
    return f"✗ {cell.total - cell.passed}/{cell.total} [{tag}{known}]"


def _ref(refs: dict[str, int], reason: str) -> int:
    return refs.setdefault(reason, len(refs) + 1)


def _esc(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def render(result: MatrixResult, env: dict[str, str], stale_known: list[KnownFailure]) -> str:
    """docs/attention-matrix.md."""
    refs: dict[str, int] = {}
    failures: list[Cell] = []
    lines = [
        f"# Attention matrix ({result.device})",
        "",
        "Generated by `updraft kit run` on the hardware named below; do not edit by hand. Anything",
        "failing that is not listed in [KNOWN_FAILURES.md](KNOWN_FAILURES.md) is a regression (the",
        "command exits non-zero).",
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {k} | {_esc(v) if k != 'command' else v} |" for k, v in env.items()]
    n_fail = len(result.failing())
    n_known = n_fail - len(result.regressions())
    verdict = "every cell that ran passed" if not n_fail else f"{n_fail} failing cells ({n_known} known, {n_fail - n_known} regressions)"
    lines += [
        f"| tier | {result.tier}: {result.cases_run} cases and checks in {result.seconds / 60:.1f} min |",
        f"| result | {verdict} |",
        "",
        "## Matrix",
        "",
        "Rows are backends. Per forward mode: `eager` (one forward vs the float64 reference, KV writes",
        "checked), `graph-metadata` (capture-time metadata, production replay fill and replay-init, then",
        "an eager forward over the static buffers: no graph), `graph` (captured and replayed: a real CUDA",
        "graph on GPU, the graph emulator on CPU, which also refuses changed host scalars or rebound",
        "buffers). Graph runner modes replay each case at capture bs 1x/2x/4x with padded rows filled like",
        "production and with small real requests as padding; static inputs are poisoned with stale values",
        "before each replay; the KV pool and the metadata invariants are checked. The last columns drive",
        "the engine's own graph runners (tiny random target + EAGLE head) against their eager paths,",
        "row by row. `✓ (n)`: n cases passed; `✗ f/n`: f of n failed (first failure below); `—`: no",
        "such path (note); `skip: hardware`: cannot run on this machine.",
        "",
    ]
    keys = [c.key for c in result.columns]
    lines.append("| backend | " + " | ".join(keys) + " |")
    lines.append("|---" * (len(keys) + 1) + "|")
    for b in result.backends:
        row = [cell_text(result.cell(b, k), refs, failures) for k in keys]
        lines.append(f"| {b} | " + " | ".join(row) + " |")
    if failures:
        lines += ["", "## Failures", ""]
        for i, cell in enumerate(failures, 1):
            what = cell.first_failure or cell.reason
            known = f" Known: {_esc(cell.known)}" if cell.known else " **Not in KNOWN_FAILURES.md: regression.**"
            lines.append(f"- F{i}: {cell.backend} / {cell.column}: `{_esc(what)}`.{known}")
    if refs:
        lines += ["", "## Notes", ""]
        lines += [f"{n}. {_esc(reason)}" for reason, n in sorted(refs.items(), key=lambda kv: kv[1])]
    lines += ["", "## Scope", "", *scope_lines(result.tier)]
    if stale_known:
        lines += ["", "## Known failures that did not fail here", ""]
        lines += [f"- {k.backend} / {k.device} / {k.column}: {_esc(k.root_cause)}" for k in stale_known]
    return "\n".join(lines) + "\n"


def scope_lines(tier: str) -> list[str]:
    """What a tier runs (from the constants that drive it)."""
    from updraft.kit.matrix import GRAPH_COMBOS, HEADS, ROUNDS, SUBSET_SIZES

    def combos(runner: str) -> str:
        return ", ".join(f"{p} x{m}" for p, m in GRAPH_COMBOS[(tier, runner)])

    eager = ("the whole sweep (dtype x page size x KV layout x heads x length sets, tree masks) plus a case at "
             "exactly the table width" if tier == "full" else
             "every length set of the mode once, rotating layout / page size / heads / dtype, a tree case, an "
             "exact-width case")
    graph = ("every length set with two layout / page / heads / dtype combinations, plus an exact-width case"
             if tier == "full" else "one mixed batch around a page boundary and an exact-width case")
    return [
        f"- `eager` runs {eager}.",
        f"- `graph-metadata` and `graph` run {graph}; pad style x capture multiple: graph-metadata {combos('graph-metadata')}; "
        f"graph {combos('graph')}. Tree masks run in the eager column only: graph replay refuses custom masks "
        "(`PhaseGraphRunner.can_run`).",
        f"- Production runners: heads {', '.join(HEADS[tier])}; {ROUNDS[tier]} round(s) of batches of "
        f"{', '.join(map(str, SUBSET_SIZES[tier]))} requests against graphs of bs 4, 2, 1 (5 is the eager fallback); "
        "float32; on CUDA each column also checks that its outputs survive the other graphs' replays.",
    ]


def summary_lines(result: MatrixResult) -> list[str]:
    """Console summary: one line per failing cell, then the verdict."""
    out = []
    for cell in result.failing():
        tag = "known" if cell.known else "REGRESSION"
        what = cell.first_failure or cell.reason
        out.append(f"[{tag}] {cell.backend} / {cell.column}: {cell.total - cell.passed}/{cell.total} failed: {what}")
    ran = [c for c in result.cells.values() if c.status in ("pass", "fail", "blocked")]
    out.append(
        f"kit {result.tier} on {result.device}: {len(ran)} cells ran, {len(result.failing())} failing, "
        f"{len(result.regressions())} not in KNOWN_FAILURES.md ({result.cases_run} cases, {result.seconds:.0f}s)"
    )
    return out


# ---- JSON (partial runs merged into one matrix) ---------------------------------------------
def to_json(result: MatrixResult, env: dict[str, str]) -> dict:
    """The raw matrix: enough to re-render it, or to merge it with other partial runs."""
    return {
        "env": env,
        "device": result.device,
        "tier": result.tier,
        "backends": result.backends,
        "columns": [c.key for c in result.columns],
        "seconds": result.seconds,
        "cases_run": result.cases_run,
        "cells": [dataclasses.asdict(c) | {"known": ""} for c in result.cells.values()],
    }


def merge_json(parts: list[dict]) -> tuple[MatrixResult, dict[str, str]]:
    """One matrix from partial runs (e.g. one backend per device call): later parts win per
    cell; backends and columns keep the canonical order; the header lists every command."""
    from updraft.kit.matrix import BACKENDS, Column, all_columns

    if not parts:
        raise ValueError("nothing to merge")
    devices = {p["device"] for p in parts}
    tiers = {p["tier"] for p in parts}
    if len(devices) > 1 or len(tiers) > 1:
        raise ValueError(f"cannot merge runs of different devices / tiers: {sorted(devices)} {sorted(tiers)}")
    cells: dict[tuple[str, str], Cell] = {}
    for p in parts:
        for c in p["cells"]:
            cell = Cell(**c)
            cells[(cell.backend, cell.column)] = cell
    keys = {k for p in parts for k in p["columns"]}
    columns: list[Column] = [c for c in all_columns() if c.key in keys]
    backends = [b for b in BACKENDS if any(p_b == b for p in parts for p_b in p["backends"])]
    for b in backends:  # a backend absent from a part's columns: mark those cells as not run
        for col in columns:
            cells.setdefault((b, col.key), Cell(b, col.key, "blocked", reason="not run in any merged part"))
    env = dict(parts[-1]["env"])
    env["command"] = "<br>".join(p["env"].get("command", "") for p in parts)
    result = MatrixResult(parts[0]["device"], parts[0]["tier"], backends, columns, cells,
                          sum(p["seconds"] for p in parts), sum(p["cases_run"] for p in parts))
    return result, env

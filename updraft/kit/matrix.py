"""The attention matrix: backends x (forward mode x runner mode, production runners), run on
the hardware at hand.

A cell is one backend and one column. Attention columns are ``"<MODE> <runner>"`` with runner
``eager`` (``harness.run_eager``), ``graph-metadata`` (``graph_harness.run_graph_metadata``) or
``graph`` (``graph_harness.run_graph``: a real CUDA graph, or the CPU emulator); production columns
are the ``runner_harness.COLUMNS`` (graph vs eager of the engine's own phase runners; ``fused
iteration``: ``fused_harness``).

Work is cut into units (a backend, one or more columns, a slice of cases) and run in worker
processes (``spawn``; CPU) or in-process (CUDA: one context, one device). Every case that raises
is a failed case; a unit whose set-up raises makes its columns ``blocked``.

Status of a cell: ``pass`` (every case ok), ``fail`` (some case failed), ``none`` (``—``: the
backend has no such path; the reason is a footnote), ``blocked`` (could not run), ``skip``
(``skip: hardware``).
"""

from __future__ import annotations

import os
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context

from updraft.batch import REAL_MODES, ForwardMode
from updraft.progress import bar as progress_bar

ATTN_MODES = REAL_MODES  # the matrix's column order
RUNNERS = ("eager", "graph-metadata", "graph")
#: Production-runner columns -> (draft extend version of the engine that serves it, the forward
#: mode its graph captures). Defined here, not in runner_harness, so that deciding which cells
#: apply never imports the engine (whose import needs every engine dependency).
PRODUCTION_COLUMNS: dict[str, tuple[str, ForwardMode]] = {
    "draft decode": ("v2", ForwardMode.DRAFT_DECODE),
    "draft chain": ("v2", ForwardMode.DRAFT_DECODE),
    "draft extend v1": ("v1", ForwardMode.DRAFT_EXTEND),
    "draft extend v2": ("v2", ForwardMode.DRAFT_EXTEND_V2),
    "verify": ("v2", ForwardMode.TARGET_VERIFY),
    # its graph holds every mode of FUSED_MODES; the one named here is the target's
    "fused iteration": ("v2", ForwardMode.TARGET_VERIFY),
}
PRODUCTION = tuple(PRODUCTION_COLUMNS)
#: The column of the whole speculative iteration in one graph (``FusedIteration``: draft chain,
#: verify, accept, draft extend v2). It runs on an engine of its own (``fused_harness``), and its
#: graph needs every one of these modes captured by the backend.
FUSED_ITERATION = "fused iteration"
FUSED_MODES = (ForwardMode.DRAFT_DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND_V2)
BACKENDS = ("torch_native", "triton", "flex", "mla")
#: Production-runner checks per tier: batch sizes in order (graphs of bs 4, 2, 1 are captured),
#: rounds (one eager speculative iteration apart: lengths change), draft heads (EAGLE-1: the
#: target's last hidden state; EAGLE-3: three target layers, its own vocabulary mapped to target
#: ids inside the chain; MTP: two modules, each with its own KV layer and per-row state, cycled).
SUBSET_SIZES = {"full": (4, 3, 5, 2, 1), "quick": (4, 3, 5)}
ROUNDS = {"full": 2, "quick": 1}
HEADS = {"full": ("eagle", "eagle3", "mtp"), "quick": ("eagle",)}
#: The fused iteration's batches come from two pools: greedy requests only (the greedy graphs,
#: captured at start) and all requests (with sampling ones: the sampled graphs, captured on first
#: use).
FUSED_POOLS = ("greedy", "mixed")
#: (pad style, capture multiple) per tier and graph runner mode. ('real', 1) has no padding at
#: all: the same replay as ('fill', 1), not repeated. Quick keeps both pad styles for the cheap
#: graph-metadata mode and the heavily padded fill x4 for the graph mode.
_FULL_COMBOS = (("fill", 1), ("fill", 2), ("fill", 4), ("real", 2), ("real", 4))
GRAPH_COMBOS = {
    ("full", "graph"): _FULL_COMBOS,
    ("full", "graph-metadata"): _FULL_COMBOS,
    ("quick", "graph"): (("fill", 4),),
    ("quick", "graph-metadata"): (("fill", 2), ("real", 2)),
}
#: Cases per work unit (progress granularity and load balance).
CHUNK = {"eager": 12, "graph-metadata": 6, "graph": 4}


@dataclass(frozen=True)
class Column:
    key: str  # "DECODE graph", "verify"
    runner: str  # eager | graph-metadata | graph | production
    mode: ForwardMode | None = None

    @property
    def production(self) -> bool:
        return self.runner == "production"


def all_columns() -> list[Column]:
    cols = [Column(f"{m.name} {r}", r, m) for m in ATTN_MODES for r in RUNNERS]
    return cols + [Column(p, "production") for p in PRODUCTION]


def select_columns(modes: list[str] | None, runners: list[str] | None) -> list[Column]:
    """Columns matching ``modes`` (forward mode names or production column names) and
    ``runners`` (eager, graph-metadata, graph, production); None = all."""
    known_modes = {m.name for m in ATTN_MODES} | set(PRODUCTION)
    for m in modes or []:
        if m not in known_modes:
            raise ValueError(f"unknown mode {m!r}; choose from {', '.join(sorted(known_modes))}")
    for r in runners or []:
        if r not in RUNNERS + ("production",):
            raise ValueError(f"unknown runner {r!r}; choose from {', '.join(RUNNERS + ('production',))}")
    out = []
    for c in all_columns():
        name = c.mode.name if c.mode is not None else c.key
        if modes and name not in modes:
            continue
        if runners and c.runner not in runners:
            continue
        out.append(c)
    return out


@dataclass
class Cell:
    backend: str
    column: str
    status: str = "pass"  # pass | fail | none | blocked | skip
    passed: int = 0
    total: int = 0
    first_failure: str = ""
    reason: str = ""  # why '—', 'blocked' or 'skip'
    known: str = ""  # root cause from KNOWN_FAILURES.md when the failure is listed
    seconds: float = 0.0

    @property
    def failing(self) -> bool:
        return self.status in ("fail", "blocked")


@dataclass
class MatrixResult:
    device: str
    tier: str
    backends: list[str]
    columns: list[Column]
    cells: dict[tuple[str, str], Cell]
    seconds: float = 0.0
    cases_run: int = 0

    def cell(self, backend: str, column: str) -> Cell:
        return self.cells[(backend, column)]

    def failing(self) -> list[Cell]:
        return [c for c in self.cells.values() if c.failing]

    def regressions(self) -> list[Cell]:
        """Failing cells not listed in KNOWN_FAILURES.md."""
        return [c for c in self.failing() if not c.known]


# ---- applicability ---------------------------------------------------------------------------
#: Why a backend has no graph path for a mode (footnotes); the default names graph_modes.
NO_GRAPH_REASONS = {
    ("*", ForwardMode.EXTEND): "prefill (EXTEND) is never captured: variable lengths, one forward per chunk",
    ("torch_native", ForwardMode.DRAFT_EXTEND): (
        "torch_native runs packed, variable-length modes per request on the host (one SDPA call "
        "each): eager only, so the v1 draft extend always falls back"
    ),
    ("flex", None): (
        "flex has no graph path yet (graph_modes is empty): capture needs the compiled kernels warmed "
        "per shape and a BlockMask built once over static buffers (see flex_backend's docstring)"
    ),
}


#: Why a backend that serves no ordinary (separate K/V) cache has no production-runner cells.
NO_PRODUCTION_REASON = (
    "{backend} serves MLA's shared latent cache only; the production runners' tiny engine is a Llama (separate K "
    "and V per head): its checks need an MLA target and draft"
)


def case_families(backend: str) -> tuple[str, ...]:
    """The head families (``cases.FAMILIES``) whose cases ``backend`` runs: ``standard`` where
    it serves separate K/V caches, ``mla`` where it serves the shared latent cache."""
    from updraft.attention import backend_class

    cls = backend_class(backend)
    return tuple(f for f, serves in (("standard", cls.separate_kv), ("mla", cls.v_layouts)) if serves)


def no_graph_reason(backend: str, mode: ForwardMode) -> str:
    for key in ((backend, mode), ("*", mode), (backend, None)):
        if key in NO_GRAPH_REASONS:
            return NO_GRAPH_REASONS[key]
    return f"{backend} does not list {mode.name} in graph_modes"


def hardware_skip(backend: str, device: str) -> str:
    """'' if ``backend`` can run on ``device`` here, else why not (``skip: hardware``)."""
    from updraft.attention import backend_class

    try:
        cls = backend_class(backend)
    except ImportError as exc:
        return f"{backend} cannot be imported here ({exc})"
    if device not in cls.devices:
        return f"{backend} does not run on {device}"
    # The triton backend and the ones built on it (mla) run on a CPU only interpreted. (Checked
    # through the class hierarchy's names: importing triton_backend here would need triton.)
    on_triton = any(base.__dict__.get("name") == "triton" for base in cls.__mro__)
    if on_triton and device == "cpu":
        from updraft.attention.triton_kernels import decode, interpreting

        if not interpreting() or type(decode._decode_kernel).__name__ != "InterpretedFunction":
            return "triton on CPU needs TRITON_INTERPRET=1 set before triton is imported"
    return ""


def cell_applicability(backend: str, col: Column, device: str) -> tuple[str, str]:
    """(status, reason) for a cell that will not run, or ('', '') for one that will."""
    skip = hardware_skip(backend, device)
    if skip:
        return "skip", skip
    if col.runner == "eager":
        return "", ""
    from updraft.attention import backend_class

    cls = backend_class(backend)
    graph_modes = cls.graph_modes
    if col.production and not cls.separate_kv:
        return "none", NO_PRODUCTION_REASON.format(backend=backend)
    if col.production:
        modes = FUSED_MODES if col.key == FUSED_ITERATION else (PRODUCTION_COLUMNS[col.key][1],)
        missing = [m for m in modes if m not in graph_modes]
        if missing:
            return "none", no_graph_reason(backend, missing[0])
        return "", ""
    assert col.mode is not None
    if col.mode not in graph_modes:
        return "none", no_graph_reason(backend, col.mode)
    return "", ""


# ---- work units ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    backend: str
    columns: tuple[str, ...]
    runner: str
    items: tuple = ()  # attention: (case, mult, pad) triples
    weight: int = 1  # progress-bar units


@dataclass
class Outcome:
    """One case (or production check) of one cell; ``blocked`` when the unit's set-up raised."""

    backend: str
    column: str
    ok: bool
    detail: str = ""
    blocked: bool = False


def plan_units(backends: list[str], columns: list[Column], device: str, tier: str) -> Iterator[Unit]:
    from updraft.kit.cases import eager_cases, graph_cases

    for backend in backends:
        for col in columns:
            if col.production or cell_applicability(backend, col, device)[0]:
                continue
            assert col.mode is not None
            fams = case_families(backend)
            if col.runner == "eager":
                items = [(c, 1, "") for f in fams for c in eager_cases(col.mode, tier, f)]
            else:
                items = [(c, m, p) for f in fams for c in graph_cases(col.mode, tier, f)
                         for p, m in GRAPH_COMBOS[(tier, col.runner)]]
            n = CHUNK[col.runner]
            for i in range(0, len(items), n):
                chunk = tuple(items[i : i + n])
                yield Unit(backend, (col.key,), col.runner, chunk, len(chunk))
        prod = [c.key for c in columns if c.production and not cell_applicability(backend, c, device)[0]]
        for version in ("v2", "v1"):
            cols = tuple(c for c in prod if PRODUCTION_COLUMNS[c][0] == version and c != FUSED_ITERATION)
            if cols:
                checks = len(HEADS[tier]) * ROUNDS[tier] * len(SUBSET_SIZES[tier]) * len(cols)
                yield Unit(backend, cols, "production", (), checks)
        if FUSED_ITERATION in prod:  # its own unit (its own engine): runs beside the others
            checks = len(HEADS[tier]) * ROUNDS[tier] * len(SUBSET_SIZES[tier]) * len(FUSED_POOLS)
            yield Unit(backend, (FUSED_ITERATION,), "production", (), checks)


def run_unit(unit: Unit, device: str, tier: str) -> list[Outcome]:
    """Run one unit (in a worker process or in-process)."""
    # CPU flex is the unfused implementation on purpose (exact); its warning is noise here.
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    try:
        if unit.runner == "production":
            from updraft.kit.runner_harness import run_runner_checks

            res = run_runner_checks(unit.backend, device, list(unit.columns), tier=tier)
            return [Outcome(unit.backend, col, c.ok, c.describe()) for col, checks in res.items() for c in checks]
        return [_run_item(unit.backend, unit.columns[0], unit.runner, item, device) for item in unit.items]
    except Exception as exc:  # noqa: BLE001 - set-up failure: the unit's columns are blocked
        msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if os.environ.get("UPDRAFT_KIT_TRACEBACK"):
            traceback.print_exc()
        return [Outcome(unit.backend, col, False, msg, blocked=True) for col in unit.columns]


def _run_item(backend: str, column: str, runner: str, item: tuple, device: str) -> Outcome:
    from updraft.kit.graph_harness import run_graph, run_graph_metadata
    from updraft.kit.harness import run_eager

    case, mult, pad = item
    try:
        if runner == "eager":
            r = run_eager(backend, case, device)
        elif runner == "graph":
            r = run_graph(backend, case, mult, pad, device)
        else:
            r = run_graph_metadata(backend, case, mult, pad, device)
        return Outcome(backend, column, r.ok, "" if r.ok else r.describe())
    except Exception as exc:  # noqa: BLE001 - a raising case is a failed case
        label = case.name + (f" pad={pad} x{mult}" if pad else "")
        first = str(exc).splitlines()[0] if str(exc) else ""
        return Outcome(backend, column, False, f"{label}: raised {type(exc).__name__}: {first}")


def _worker_init() -> None:
    import torch

    from updraft.ops.interpreter import install

    torch.set_num_threads(1)  # several workers on a few cores: no oversubscription
    install()  # a spawned worker's own interpreter (no-op unless TRITON_INTERPRET=1)


def run_matrix(
    backends: list[str],
    columns: list[Column],
    device: str,
    tier: str,
    *,
    jobs: int = 1,
    progress: bool = True,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> MatrixResult:
    """Run every applicable cell; returns the aggregated matrix (known failures not applied)."""
    t0 = time.perf_counter()
    cells: dict[tuple[str, str], Cell] = {}
    for b in backends:
        for c in columns:
            status, reason = cell_applicability(b, c, device)
            cells[(b, c.key)] = Cell(b, c.key, status or "pass", reason=reason)
    units = list(plan_units(backends, columns, device, tier))
    bar = progress_bar(sum(u.weight for u in units), f"kit {tier} on {device}", enabled=progress, unit="case",
                       dynamic_ncols=True)
    outcomes: list[Outcome] = []

    def take(unit: Unit, got: list[Outcome], seconds: float) -> None:
        outcomes.extend(got)
        for col in unit.columns:
            cells[(unit.backend, col)].seconds += seconds / len(unit.columns)
        if on_outcome is not None:
            for o in got:
                on_outcome(o)
        if bar is not None:
            bar.update(unit.weight)
            bad = sum(not o.ok for o in outcomes)
            bar.set_postfix_str(f"{unit.backend} {unit.columns[0]}, {bad} failed")

    import torch

    threads = torch.get_num_threads()
    try:
        if jobs <= 1:
            # Tiny tensors: one intra-op thread. Several would spin-wait against each other (and
            # against anything else on the machine) for no gain.
            torch.set_num_threads(1)
            for u in units:
                t = time.perf_counter()
                take(u, run_unit(u, device, tier), time.perf_counter() - t)
        else:
            _run_parallel(units, device, tier, jobs, take)
    finally:
        torch.set_num_threads(threads)
        if bar is not None:
            bar.close()
    _aggregate(cells, outcomes)
    return MatrixResult(device, tier, list(backends), list(columns), cells, time.perf_counter() - t0, len(outcomes))


def _aggregate(cells: dict[tuple[str, str], Cell], outcomes: list[Outcome]) -> None:
    """Fold outcomes into their cells: all ok -> pass; only set-up failures -> blocked;
    otherwise fail, with the first failing case."""
    by_cell: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        by_cell.setdefault((o.backend, o.column), []).append(o)
    for key, cell in cells.items():
        if cell.status != "pass":  # none / skip: nothing ran
            continue
        got = by_cell.get(key, [])
        cell.total = len(got)
        cell.passed = sum(o.ok for o in got)
        failed = [o for o in got if not o.ok and not o.blocked]
        blocked = [o for o in got if o.blocked]
        if not got:
            cell.status, cell.reason = "blocked", "no case ran"
        elif blocked and not failed and cell.passed == 0:
            cell.status, cell.reason = "blocked", blocked[0].detail
        elif failed or blocked:
            cell.status = "fail"
            cell.first_failure = (failed or blocked)[0].detail


def _run_parallel(units: list[Unit], device: str, tier: str, jobs: int, take: Callable[[Unit, list[Outcome], float], None]) -> None:
    """Units in ``jobs`` spawned workers, heaviest first. A crashed worker blocks what is left."""
    order = sorted(units, key=lambda u: -_cost(u))
    ctx = get_context("spawn")
    started: dict[object, tuple[Unit, float]] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init) as pool:
        for u in order:
            started[pool.submit(run_unit, u, device, tier)] = (u, time.perf_counter())
        for fut in as_completed(started):
            unit, t = started[fut]
            try:
                got = fut.result()
            except Exception as exc:  # noqa: BLE001 - BrokenProcessPool and friends
                got = [Outcome(unit.backend, c, False, f"worker died: {type(exc).__name__}", blocked=True) for c in unit.columns]
            take(unit, got, time.perf_counter() - t)


def _cost(u: Unit) -> float:
    """Rough relative cost (scheduling heaviest first keeps both workers busy to the end)."""
    per = {"eager": 1.0, "graph-metadata": 2.0, "graph": 4.0, "production": 3.0}[u.runner]
    return per * u.weight * (3.0 if u.backend != "torch_native" else 1.0)


@dataclass
class KnownFailure:
    backend: str
    device: str
    column: str
    status: str
    root_cause: str
    matched: list[str] = field(default_factory=list)

    def matches(self, cell: Cell, device: str) -> bool:
        return (
            self.backend in ("*", cell.backend)
            and self.device in ("any", "*", device)
            and self.column in ("*", cell.column)
        )


def apply_known(result: MatrixResult, known: list[KnownFailure]) -> list[KnownFailure]:
    """Mark failing cells listed in KNOWN_FAILURES.md; returns the entries for this device and
    these backends that matched nothing failing (fixed? then they should leave the list)."""
    for cell in result.failing():
        for k in known:
            if k.matches(cell, result.device):
                cell.known = k.root_cause
                k.matched.append(f"{cell.backend}/{cell.column}")
                break
    keys = {c.key for c in result.columns}
    return [
        k for k in known
        if not k.matched and k.device in ("any", "*", result.device)
        and k.backend in ("*", *result.backends) and k.column in ("*", *keys)
    ]

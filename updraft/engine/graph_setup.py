"""Which phases an engine captures, and the capture itself (with a progress bar and a log line
per phase: batch sizes, time, graph memory)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from updraft.batch import CaptureHidden, FeatureKind, ForwardMode
from updraft.engine.spec_driver import fused_planned
from updraft.models.mtp import chain_step
from updraft.progress import bar as progress_bar
from updraft.runtime.graphs.phase_graph import PhaseSpec, capture_sizes
from updraft.runtime.model_runner import ModelRunner
from updraft.spec.proposers import DraftModelProposer

if TYPE_CHECKING:
    from updraft.engine.engine import Engine

logger = logging.getLogger("updraft")

PHASE_FLAGS = {
    ForwardMode.EXTEND: "prefill",
    ForwardMode.DECODE: "decode",
    ForwardMode.TARGET_VERIFY: "target_verify",
    ForwardMode.DRAFT_DECODE: "draft_decode",
    ForwardMode.DRAFT_EXTEND: "draft_extend",
    ForwardMode.DRAFT_EXTEND_V2: "draft_extend",
}


def graph_kind(engine: Engine) -> tuple[str, str]:
    """("cuda" | "emulate" | "off", reason)."""
    cfg = engine.config
    if cfg.disable_cuda_graph:
        return "off", "--disable-cuda-graph"
    if engine.device.type == "cuda":
        return "cuda", ""
    if cfg.graph_emulate:
        return "emulate", ""
    return "off", "no CUDA device (use --graph-emulate to exercise the graph machinery on CPU)"


#: Prefill graphs: prompt chunks of up to this many tokens per request replay a graph (padded to
#: the narrowest width that fits), for batches of up to PREFILL_MAX_BS requests. An eager prefill
#: is host-bound (~1000 launches: 20-30 ms for SmolLM2 on an H100 against ~1.5 ms of GPU work),
#: and every arriving request pays one, stalling the requests that are decoding.
PREFILL_WIDTHS = (64, 256)
PREFILL_MAX_BS = 4
#: Many-request prefill graphs: a budget of token rows shared by up to the largest captured batch
#: of prompt chunks (each up to the budget); padded requests take one row each. A wave of
#: arrivals (25 mt_bench prompts, ~2k tokens) is one eager prefill otherwise: ~30 ms of host
#: work for SmolLM2 on an H100 against 2.3 ms on the GPU, paid again by the draft's prefill.
#: The smallest budget: ``prefill_token_budgets`` doubles it up to the chunk size.
PREFILL_MIN_TOKENS = 512


def prefill_token_budgets(chunk: int, explicit: list[int] | None, context: int) -> list[int]:
    """The token budgets of the many-request prefill graphs: ``explicit``, else 512, 1024, ...
    up to ``chunk`` (the most prompt tokens a prefill step takes), the chunk itself last; none
    above ``chunk``; each bounded by the context."""
    if explicit is not None:
        return sorted({min(t, chunk, context) for t in explicit})
    out = []
    t = PREFILL_MIN_TOKENS
    while t < chunk:
        out.append(t)
        t *= 2
    return sorted({min(x, context) for x in [*out, chunk]})


def _prefill_phases(engine: Engine, capture: CaptureHidden, feature: FeatureKind, feature_dim: int) -> list[PhaseSpec]:
    """A model's prefill graphs: one width per request for a few short prompts (``PREFILL_WIDTHS``)
    and the many-request token budgets."""
    cfg = engine.config
    context = engine.model_config.context_len
    phases = [PhaseSpec(ForwardMode.EXTEND, w, "last", capture, feature, feature_dim) for w in PREFILL_WIDTHS]
    budgets = prefill_token_budgets(cfg.chunked_prefill_size, cfg.prefill_graph_tokens, context)
    # a budget's rows: its tokens plus one per padded request (a full chunk of 3 requests still
    # replays the graph of batch size 4)
    pad = max(capture_sizes(cfg.cuda_graph_max_bs, cfg.max_running_requests, cfg.cuda_graph_bs)) - 1
    phases += [PhaseSpec(ForwardMode.EXTEND, t, "last", capture, feature, feature_dim, tokens=t + pad) for t in budgets]
    return phases


def prefill_sizes(phase: PhaseSpec, sizes: list[int]) -> list[int]:
    """Batch sizes a prefill phase captures: up to ``PREFILL_MAX_BS`` for the per-request widths;
    the powers of two and the largest size for a token budget (a batch replays the next size up:
    fewer graphs, and a padded request costs one token row)."""
    if not phase.tokens:
        return [b for b in sizes if b <= PREFILL_MAX_BS]
    fit = [b for b in sizes if b <= phase.tokens]  # every captured request holds a token row
    if not fit:
        return []
    return sorted({b for b in fit if b & (b - 1) == 0} | {max(fit)}, reverse=True)


def plan_phases(engine: Engine) -> list[tuple[ModelRunner, PhaseSpec]]:
    jobs: list[tuple[ModelRunner, PhaseSpec]] = []
    spec = engine.spec
    target_capture = spec.target_capture if spec is not None else CaptureHidden.NONE
    jobs += [(engine.runner, p) for p in _prefill_phases(engine, target_capture, FeatureKind.NONE, 0)]
    if spec is None:
        jobs.append((engine.runner, PhaseSpec(ForwardMode.DECODE, 1, "last")))
        return jobs
    ndt = spec.ndt
    # Where this per-phase worker is the iteration (no fused driver), adaptive speculation may
    # run any S of its choices: a verify (and v2 draft extend) graph per width S + 1, the widest
    # first, and S = 0's plain decode step. Beside a fused driver it is only the fallback: the
    # widest width, as sized for num_steps.
    choices = [spec.num_steps] if fused_planned(engine.config, engine.device) else spec.adaptive.choices
    widths = sorted({s + 1 for s in choices if s > 0} | {ndt}, reverse=True)
    jobs += [(engine.runner, PhaseSpec(ForwardMode.TARGET_VERIFY, w, "all", spec.target_capture)) for w in widths]
    if 0 in choices:
        jobs.append((engine.runner, PhaseSpec(ForwardMode.DECODE, 1, "last", spec.target_capture)))
    proposer = spec.proposer
    if isinstance(proposer, DraftModelProposer):
        draft = proposer.runner
        own = FeatureKind.DRAFT if proposer.shift else FeatureKind.NONE
        # one DRAFT_DECODE graph serves every chain step, except a multi-layer draft's: one per step
        # (its layer and rotary offset are baked in), for the per-step path (sampled drafts, an S
        # the chain graph was not captured for)
        keys = sorted({chain_step(draft.model, j).key for j in range(1, spec.num_steps)})
        jobs += [(draft, PhaseSpec(ForwardMode.DRAFT_DECODE, 1, "last", CaptureHidden.LAST, own,
                                   draft.config.hidden_size if own else 0, draft_step=k)) for k in keys]
        feat = FeatureKind.TARGET if proposer.shift else FeatureKind.NONE
        feat_dim = 0
        if feat:
            tcfg = engine.model_config
            feat_dim = tcfg.hidden_size * max(1, len(engine.model.aux_layers))
        # the draft's prefill (EAGLE: over the target's features of the prompt)
        jobs += [(draft, p) for p in _prefill_phases(engine, CaptureHidden.LAST, feat, feat_dim)]
        if proposer.draft_extend == "v2":
            jobs += [(draft, PhaseSpec(ForwardMode.DRAFT_EXTEND_V2, w, "select", CaptureHidden.LAST, feat, feat_dim)) for w in widths]
        else:  # packed: one graph of width ndt runs every shorter extend
            jobs.append((draft, PhaseSpec(ForwardMode.DRAFT_EXTEND, ndt, "last", CaptureHidden.LAST, feat, feat_dim)))
    return jobs


def capture_engine_graphs(engine: Engine) -> list[str]:
    """Capture every planned phase; returns log lines (also logged)."""
    kind, reason = graph_kind(engine)
    if kind == "off":
        lines = [f"graphs: off ({reason})"]
        logger.info(lines[0])
        return lines
    cfg = engine.config
    sizes = capture_sizes(cfg.cuda_graph_max_bs, cfg.max_running_requests, cfg.cuda_graph_bs)
    disabled = set(cfg.disable_graph_phase or [])
    emulate = kind == "emulate"
    jobs = plan_phases(engine)
    lines = []
    bar = progress_bar(len(jobs), "Capturing graphs", enabled=cfg.progress)
    try:
        for runner, phase in jobs:
            name = phase.mode.name
            prefill = phase.mode == ForwardMode.EXTEND
            what = f"{phase.tokens} tokens" if phase.tokens else f"width {phase.width}"
            if PHASE_FLAGS[phase.mode] in disabled:
                lines.append(f"graphs: {name} disabled by --disable-graph-phase")
            elif prefill and not prefill_sizes(phase, sizes):
                lines.append(f"graphs: {name} {what}: no batch size to capture (at most {PREFILL_MAX_BS} requests, "
                             "or no more than its token rows)")
            elif phase.mode not in runner.backend.graph_modes:
                lines.append(f"graphs: {name} eager (backend {runner.backend_name} cannot capture it)")
            else:
                stats = runner.capture(phase, prefill_sizes(phase, sizes) if prefill else sizes, emulate=emulate)
                step = f" step {phase.draft_step}" if phase.draft_step else ""
                lines.append(
                    f"graphs: {'emulated ' if emulate else ''}{name}{step} {what} captured for bs "
                    f"{stats.sizes[-1]}..{stats.sizes[0]} ({len(stats.sizes)} sizes) in {stats.seconds:.2f}s, "
                    f"{stats.memory_bytes / 2**20:.0f} MiB"
                )
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    lines += _capture_draft_chain(engine, sizes, emulate, disabled)
    for line in lines:
        logger.info(line)
    return lines


def _capture_draft_chain(engine: Engine, sizes: list[int], emulate: bool, disabled: set[str]) -> list[str]:
    """The S-1 draft forwards of an iteration in one graph, when the draft backend can capture."""

    spec = engine.spec
    if spec is None or not isinstance(spec.proposer, DraftModelProposer) or spec.num_steps < 2:
        return []
    if "draft_decode" in disabled:
        return []
    proposer = spec.proposer
    runner = proposer.runner
    if ForwardMode.DRAFT_DECODE not in runner.backend.graph_modes:
        return [f"graphs: draft chain eager (backend {runner.backend_name} cannot capture DRAFT_DECODE)"]
    stats = proposer.capture_chain(spec.num_steps, sizes, emulate=emulate)
    return [
        f"graphs: {'emulated ' if emulate else ''}draft chain of {spec.num_steps - 1} DRAFT_DECODE steps captured for bs "
        f"{stats.sizes[-1]}..{stats.sizes[0]} in {stats.seconds:.2f}s, {stats.memory_bytes / 2**20:.0f} MiB"
    ]

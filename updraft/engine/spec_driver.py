"""The engine's side of the fused iteration (speculative, or plain decoding with overlap):
launching, overlap, deferred frees.

With overlap (the default), the engine launches iteration N+1 before it reads iteration N's
results, so the host's scheduling, detokenisation and stop checks run while the GPU works. What
that asks for (../shared/design/spec-decoding.md, "The iteration without host stalls"):

* the host learns accept lengths one iteration late; the request state the next launch needs
  lives on the device (``RowState``, the draft feature);
* KV: the scheduler allocates a lookahead that covers the iteration in flight plus the next one
  (``Engine`` doubles it), and a request that finishes or is aborted while an iteration that
  includes it is in flight keeps its KV and row until that iteration is done (``defer``), then
  frees them exactly once;
* anything that is not a plain decode iteration of fused-eligible requests (a prefill, a
  preemption, penalties, logprobs) first drains the iteration in flight (``Engine._drain``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from updraft.batch import CaptureHidden, ForwardMode
from updraft.config import EngineConfig
from updraft.engine.request import Request
from updraft.runtime.graphs.phase_graph import capture_sizes
from updraft.spec.adaptive import AdaptiveSteps
from updraft.spec.fused import FusedIteration
from updraft.spec.iter_graph import InFlight
from updraft.spec.proposers import DraftModelProposer, NgramProposer

if TYPE_CHECKING:
    from updraft.engine.engine import Engine


class SpecDriver:
    def __init__(self, fused: FusedIteration, adaptive: AdaptiveSteps, overlap: bool) -> None:
        self.fused = fused
        self.adaptive = adaptive
        self.overlap = overlap
        self.inflight: InFlight | None = None
        self._deferred: list[Request] = []
        #: request ids whose first draft exists only as a feature (a fused iteration ran last)
        self.device_owned: set[str] = set()
        self.launches = 0
        self.drains = 0  # times the pipeline emptied (a prefill, a per-step forward or idle time followed)
        self._last_done: float | None = None  # when the last iteration's results arrived
        self._skip_cost = False  # the next completion interval includes a graph capture
        self._launched = False  # a launch happened since the last completion
        self.wait_s = 0.0  # host time spent waiting for results (the rest of a step is host work)

    def launch(self, reqs: list[Request]) -> InFlight:
        bs_key = self.fused.bucket(len(reqs))
        # A request with its own seed repeats token for token only if every iteration drafts
        # the same S (its random numbers are drawn per iteration): pin S for such batches.
        seeded = any(r.params.seed is not None and not r.params.greedy for r in reqs)
        sampled = any(not r.params.greedy for r in reqs)
        s = self.adaptive.max_steps if seeded else self.adaptive.choose(bs_key, sampled)
        inf = self.fused.launch(reqs, s, sampled)
        # A capture stalls the host before this replay: the host work measured at the next
        # completion (the one in flight, or this one without overlap) includes the stall.
        self._skip_cost |= inf.captured
        self._launched = True
        if self.fused.drafter is not None:
            self.device_owned.update(r.request_id for r in reqs)
        self.launches += 1
        return inf

    def finish(self, inf: InFlight) -> tuple[list[int], list[list[int]]]:
        """Wait for ``inf`` and feed its device time, the host's work and the acceptance to the
        adaptive policy."""
        t0 = time.perf_counter()
        acc, toks = inf.wait()
        done = time.perf_counter()
        self.wait_s += done - t0
        if self._skip_cost:
            self._skip_cost = False
        elif self._launched and self._last_done is not None and done - self._last_done < _STEADY_GAP_S:
            # Back to back: the host's work per iteration is the time from the previous
            # completion to this wait. Only with a launch in between: a drain reads the
            # iteration in flight right after the previous one, with no host work between.
            self.adaptive.record_host(inf.bs, max(0.0, t0 - self._last_done), inf.sampled)
        self._last_done = done
        self._launched = False
        self.adaptive.record(inf.num_steps, [a for r, a in zip(inf.reqs, acc) if not r.finished])
        self.adaptive.record_device(inf.num_steps, inf.bs, inf.seconds(), inf.sampled)
        return acc, toks

    def chosen_steps(self) -> dict[int, int]:
        """S -> speculative iterations that ran with S drafts (empty for plain decoding)."""
        return dict(self.adaptive.chosen) if self.fused.speculative else {}

    def can_run(self, reqs: list[Request]) -> bool:
        return self.fused.can_run(reqs)[0]

    def admit(self, reqs: list[Request]) -> None:
        """The host's view of ``reqs`` becomes their device state (after a prefill or a
        per-phase iteration)."""
        self.fused.admit(reqs)

    def claim_host_drafts(self, reqs: list[Request]) -> list[Request]:
        """Those of ``reqs`` whose first draft exists only as a feature; from now on the
        per-phase path owns them (it recomputes that draft)."""
        owned = [r for r in reqs if r.request_id in self.device_owned]
        self.device_owned.difference_update(r.request_id for r in owned)
        return owned

    def forget(self, req: Request) -> None:
        self.device_owned.discard(req.request_id)

    def drained(self) -> None:
        """Nothing is in flight any more (a prefill or idle time follows): the next completion
        interval would include that gap."""
        self._last_done = None
        self.drains += 1

    def in_flight(self, req: Request) -> bool:
        return self.inflight is not None and any(r is req for r in self.inflight.reqs)

    def defer(self, req: Request) -> None:
        self._deferred.append(req)

    def take_freeable(self) -> list[Request]:
        """Deferred requests that no iteration in flight touches any more."""
        if not self._deferred:
            return []
        keep = [r for r in self._deferred if self.in_flight(r)]
        done = [r for r in self._deferred if not self.in_flight(r)]
        self._deferred = keep
        return done

    def describe(self) -> str:
        mode = "overlapped" if self.overlap else "synchronous"
        at_start = "greedy and sampled" if any(sampled for _, sampled, _ in self.fused.graphs) else "greedy"
        graphs = (f"{at_start} graphs for bs {self.fused.sizes[0]}..{self.fused.sizes[-1]} captured in "
                  f"{self.fused.capture_seconds:.2f}s{'' if at_start != 'greedy' else ' (sampled ones on first use)'}")
        if not self.fused.speculative:
            return f"plain decoding: device-state decode steps ({mode}), {graphs}"
        assist = self.fused.assist
        drafts = ("draft model" if self.fused.drafter is not None else "n-gram lookups on the device") + (
            f", lookups where the history repeats {assist.min_match}+ tokens" if assist is not None else "")
        return (f"speculation: fused iteration ({mode}, {drafts}), S chosen from {self.adaptive.choices}"
                f"{' adaptively' if self.adaptive.enabled and len(self.adaptive.choices) > 1 else ''}, {graphs}")


#: Completions further apart than this are not back to back (a prefill or idle time came between).
#: Generous: an iteration of a large model on a CPU takes a good part of a second.
_STEADY_GAP_S = 2.0

_FUSED_PHASES = ("target_verify", "draft_decode", "draft_extend")


def fused_planned(config: EngineConfig, device: torch.device) -> bool:
    """Whether this configuration runs the fused iteration: EAGLE / MTP heads with draft extend v2,
    n-gram drafts, or plain decoding with overlap; graphs on."""
    if config.disable_fused_iteration or config.disable_cuda_graph or (device.type != "cuda" and not config.graph_emulate):
        return False
    spec = config.speculative
    disabled = set(config.disable_graph_phase or [])
    if spec is None:  # plain: the device-state step only pays with overlap
        return not config.disable_overlap and "decode" not in disabled
    if spec.method == "ngram":  # no draft model: the target's verify (and decode, S = 0) only
        return not disabled & {"target_verify", "decode"}
    if spec.method not in ("eagle", "eagle3", "mtp") or spec.draft_extend != "v2":
        return False
    return not disabled & set(_FUSED_PHASES)


def build_driver(engine: Engine) -> SpecDriver | None:
    cfg = engine.config
    if not fused_planned(cfg, engine.device):
        return None
    sizes = capture_sizes(cfg.cuda_graph_max_bs, cfg.max_running_requests, cfg.cuda_graph_bs)
    emulate = engine.device.type != "cuda"
    if cfg.speculative is None:
        if ForwardMode.DECODE not in engine.runner.backend.graph_modes:
            return None
        plain = FusedIteration(engine.runner, None, engine.sampler, sizes, emulate=emulate, capture_hidden=CaptureHidden.NONE)
        steps = AdaptiveSteps([0], enabled=False)
        _capture_start(plain, steps, sampled=cfg.sampled_graphs_at_start())
        return SpecDriver(plain, steps, overlap=True)
    if engine.spec is None:
        return None
    proposer = engine.spec.proposer
    ok, _ = FusedIteration.supports(proposer)
    if not ok:
        return None
    need = [(engine.runner, ForwardMode.TARGET_VERIFY)]
    if isinstance(proposer, DraftModelProposer):
        need += [(proposer.runner, ForwardMode.DRAFT_DECODE), (proposer.runner, ForwardMode.DRAFT_EXTEND_V2)]
    else:  # n-gram: S = 0 is the target's DECODE
        need.append((engine.runner, ForwardMode.DECODE))
    if any(mode not in runner.backend.graph_modes for runner, mode in need):
        return None
    assert isinstance(proposer, DraftModelProposer | NgramProposer)
    assist = engine.spec.assist.params if engine.spec.assist is not None else None  # decided in make_worker
    fused = FusedIteration(engine.runner, proposer, engine.sampler, sizes,
                           emulate=emulate, capture_hidden=engine.spec.target_capture, assist=assist)
    adaptive = AdaptiveSteps(cfg.speculative.step_choices(), enabled=cfg.speculative.adaptive, overlap=not cfg.disable_overlap)
    _capture_start(fused, adaptive, sampled=cfg.sampled_graphs_at_start())
    return SpecDriver(fused, adaptive, overlap=not cfg.disable_overlap)


def _capture_start(fused: FusedIteration, adaptive: AdaptiveSteps, *, sampled: bool) -> None:
    """Capture the graphs at start, their device times as adaptive S's first costs: the greedy
    ones, and with ``sampled`` the sampled ones. A graph captured mid-serving stalls every request
    in flight for the capture and, the first time, for the Triton compiles of its kernels: with
    adaptive S a T > 0 batch met one such stall per S (an S = 5 run's p99 TPOT 0.5 ms, the
    adaptive one's 2.1 ms, ``benchmarks/results/2026-11-27-h100-sampled-data/``)."""
    for kind in (False, True) if sampled else (False,):
        for (s, bs), seconds in fused.capture_all(adaptive.choices, sampled=kind).items():
            adaptive.record_device(s, bs, seconds, kind)

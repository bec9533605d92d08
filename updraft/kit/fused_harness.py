"""The ``fused iteration`` production-runner column: ``FusedIteration`` (one graph per (S,
sampled, bs) holding the draft chain, verify, accept and draft extend v2, with per-row state on
the device) against its eager twin and the per-phase path, on the tiny engine.

Each check takes a batch of running requests and runs one iteration three times from the same
state:

* eager: the iteration's own body (``FusedIteration._body``) over static inputs built for exactly
  this batch (``_build`` at the real batch size: no padded rows, no graph). The kit reaches into
  these two on purpose: the reference must be the very computation the graph holds, minus the
  graph and the padding, and production has no eager entry point for it (a batch the graphs do
  not take goes to the per-phase path);
* graph: ``FusedIteration.launch`` then ``InFlight.wait``, as ``SpecDriver`` drives them: the
  smallest captured bs that fits, padded rows on row 0 and the scratch slot. Every static input
  of the graph is poisoned first with valid-looking stale values (the row list and both of its
  host staging slots, each phase's inputs, the output and its host slots): the launch and the
  body must rewrite everything a replay reads (failure class 10);
* per-phase: ``SpecWorker.speculate``, the path production takes when ``can_run`` refuses: an
  independent implementation of the same iteration (the eager twin shares the body's bugs).
  Greedy rows only (sampled rows draw other random numbers there).

Graph against eager: accepted lengths and tokens (exactly); ``RowState`` on every row (exactly;
row 0, the padding row, must hold its padding values again: ``RowState.reset_padding``); the
draft features (``next_hidden``) and an MTP head's per-row module states; both KV pools on every
slot but the scratch slot 0. Eager
against the host and the per-phase path: each row's state is what the host will take from the
results (N + accept, the last token, the RNG offset one further); greedy rows accept the same
tokens, leave the same draft feature (and MTP module states) and the same KV on their
committed positions. ``can_run``
must accept a batch iff it fits the largest captured size; above it the graph does not run.

Batches are those of the other production columns (4, 3, 5, 2, 1 against graphs of bs 4, 2, 1:
a padded replay right after a fuller one on the same graph, a refused batch, the smaller
graphs), drawn twice: from the greedy requests (the greedy graphs, captured at start) and from
all requests (a third sample: the sampled graphs, captured on first use). Sampling requests ask
for no logprobs here (those run on the per-phase path). Round r runs S = (num_steps, 1)[r % 2]
(adaptive S is off: the engine captures the greedy graphs of S = num_steps at start, S = 1 ones
on first use). The EAGLE-1 head agrees with the target often (``AGREEING``), so greedy rows
accept every length 1..S+1.

On real CUDA graphs ``cross_replay`` checks that the iteration's ``out`` buffer survives replays
of every other graph (either model's phase graphs, the draft chain, the other fused graphs) and
that the host's copy of the results survives the next launch (overlap launches iteration N+1
before it reads N). The emulator has no memory pools, so there it always passes.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from updraft.engine.engine import Engine
from updraft.engine.request import Request
from updraft.kit.matrix import FUSED_ITERATION, FUSED_POOLS, HEADS, ROUNDS
from updraft.kit.runner_harness import (
    CAPTURE_MAX_BS,
    TOL,
    RunnerCheck,
    graphs_of,
    kv_problems,
    layer_states,
    mismatch,
    prefill_requests,
    rotated_batches,
)
from updraft.kit.tiny import tiny_engine
from updraft.runtime.model_runner import ModelRunner
from updraft.spec.fused import FusedIteration
from updraft.spec.iter_graph import IterGraph
from updraft.spec.worker import SpecStepResult

#: EAGLE-1 heads of this column agree with the target often enough that greedy rows accept
#: 1..S+1 tokens (``tiny.write_head``); a random head's greedy drafts almost never match, which
#: would leave every accept-dependent write (bonus, lengths, the feature row) at the block's first
#: position. (EAGLE-3 heads stay random: their sampled rows accept 1 or 2.)
AGREEING = 0.04
#: RowState's tensors, all compared and restored (the body writes seq_len, bonus and offset).
ROW_FIELDS = ("seq_len", "bonus", "temperature", "top_k", "top_p", "min_p", "seed", "offset")
#: What the padding row 0 holds between replays (RowState's module docstring), by field.
PADDING_ROW = (("seq_len", 1), ("bonus", 0), ("offset", 0))


@dataclass
class IterResult:
    """One iteration's results as the host reads them."""

    accept: list[int]
    tokens: list[list[int]]

    @classmethod
    def of(cls, out: list[list[int]]) -> IterResult:
        acc = [r[0] for r in out]
        return cls(acc, [r[1 : 1 + a] for r, a in zip(out, acc)])


@dataclass
class FusedState:
    """Everything an iteration may write, cloned."""

    kv: list[list[torch.Tensor]]  # per model (target, draft): k layers, then v layers
    rows: tuple[torch.Tensor, ...]  # RowState, in ROW_FIELDS order
    next_token: torch.Tensor
    next_hidden: torch.Tensor
    next_q: torch.Tensor | None
    gens: list[torch.Tensor | None]
    layer_states: torch.Tensor | None = None  # an MTP head's per-row module states

    def row(self, name: str) -> torch.Tensor:
        return self.rows[ROW_FIELDS.index(name)]


def _kv(runner: ModelRunner) -> list[torch.Tensor]:
    return runner.kv_pool.k_buffer + runner.kv_pool.v_buffer


class FusedRig:
    """A tiny engine that runs the fused EAGLE iteration (draft extend v2, every phase captured
    but prefill), with its requests prefilled; snapshot, restore and the three runs."""

    def __init__(self, backend: str, device: torch.device, dtype: str, head_dir: Path, kind: str = "eagle") -> None:
        self.dtype = dtype
        self.eng: Engine = tiny_engine(backend, "v2", device, head_dir, kind=kind, dtype=dtype, capture_max_bs=CAPTURE_MAX_BS,
                                       disable_graph_phase=["prefill"], agreeing=AGREEING if kind == "eagle" else None,
                                       adaptive=False)
        drv = self.eng.driver
        if drv is None or drv.fused.drafter is None:
            raise RuntimeError(f"the tiny engine planned no fused EAGLE iteration: {self.eng.graph_log[-1:]}")
        self.fused: FusedIteration = drv.fused
        spec = self.eng.spec
        assert spec is not None
        self.worker = spec
        self.proposer: Any = spec.proposer
        self.models: tuple[ModelRunner, ModelRunner] = (self.eng.runner, self.proposer.runner)
        self.steps = (spec.num_steps, 1)
        #: accepted lengths of greedy rows so far: the column is only as strong as their spread
        self.greedy_accepts: Counter[int] = Counter()
        self.reqs: list[Request] = prefill_requests(self.eng, logprobs=False)

    # ---- state -------------------------------------------------------------------------------
    def snapshot(self) -> FusedState:
        p, st = self.proposer, self.fused.state
        return FusedState(
            [[t.clone() for t in _kv(r)] for r in self.models],
            tuple(getattr(st, f).clone() for f in ROW_FIELDS),
            p.next_token.clone(),
            p.next_hidden.clone(),
            None if p.next_q is None else p.next_q.clone(),
            [None if r.generator is None else r.generator.get_state() for r in self.reqs],
            None if (ls := layer_states(p)) is None else ls.clone(),
        )

    def restore(self, s: FusedState) -> None:
        for runner, saved in zip(self.models, s.kv):
            for t, v in zip(_kv(runner), saved):
                t.copy_(v)  # in place: backends and captured graphs hold these tensors
        for f, v in zip(ROW_FIELDS, s.rows):
            getattr(self.fused.state, f).copy_(v)
        p = self.proposer
        p.next_token.copy_(s.next_token)
        p.next_hidden.copy_(s.next_hidden)
        p.next_q = None if s.next_q is None else s.next_q.clone()
        if s.layer_states is not None:
            layer_states(p).copy_(s.layer_states)  # type: ignore[union-attr]
        for r, g in zip(self.reqs, s.gens):
            if g is not None:
                r.generator.set_state(g)  # type: ignore[union-attr]

    def _prepare(self, reqs: list[Request]) -> None:
        """What ``Engine._run`` does before a fused launch: KV for the lookahead, a current draft."""
        ok = self.eng.allocator.ensure_batch([r.row for r in reqs], [self.eng.scheduler.decode_len(r) for r in reqs])  # type: ignore[misc]
        assert ok, "the tiny engine ran out of KV pages"
        self.worker.catch_up(reqs)

    # ---- the three runs ------------------------------------------------------------------------
    def _eager(self, reqs: list[Request], s: int, sampled: bool) -> IterResult:
        g = self.fused._build(s, sampled, len(reqs))
        g.rows.copy_(torch.tensor([r.row for r in reqs], dtype=torch.long))
        return IterResult.of(self.fused._body(g).tolist())

    def _graph(self, reqs: list[Request], s: int, sampled: bool, seed: int) -> tuple[IterResult, str]:
        """Poison the graph's static inputs, launch, wait; (results, problem or '')."""
        f = self.fused
        g = f.graph_for(s, sampled, len(reqs))  # a first sampled use captures it, as launch would
        self._poison(g, reqs, seed)
        inf = f.launch(reqs, s, sampled)
        res = IterResult(*inf.wait())
        if (inf.bs, inf.num_steps, inf.sampled) != (g.bs, s, sampled):
            return res, f"launched the graph of (S {inf.num_steps}, sampled {inf.sampled}, bs {inf.bs}), not {(s, sampled, g.bs)}"
        return res, ""

    def _poison(self, g: IterGraph, reqs: list[Request], seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        table = self.eng.req_pool.req_to_token
        rows, width = int(table.shape[0]), int(table.shape[1])
        slots = min(r.kv_pool.num_slots for r in self.models)
        vocab = self.eng.model_config.vocab_size

        def fill(t: torch.Tensor, lo: int, hi: int) -> None:
            t.copy_(torch.randint(lo, hi, tuple(t.shape), generator=gen).to(t))

        # Rows of running requests outside the batch (what a fuller batch leaves there): a padded
        # entry left on one runs the iteration for that request. Not rows of the batch: a row
        # twice in one replay computes and writes the same values twice, which nothing can see.
        mine = {r.row for r in reqs}
        others = torch.tensor([r.row for r in self.reqs if r.row not in mine] or [rows - 1], dtype=torch.long)
        for t in [g.rows, *g.rows_host]:
            t.copy_(others[torch.randint(0, len(others), tuple(t.shape), generator=gen)].to(t))
        for t in [g.out, *g.out_host]:
            fill(t, 0, vocab)
        for b in g.batches:  # the inputs the body writes into each phase's batch on every replay
            fill(b.input_ids, 0, vocab)
            fill(b.positions, 0, width)
            fill(b.out_cache_loc, 1, slots)  # real slots: a padded token left on one corrupts KV
            fill(b.req_pool_indices, 1, rows)
            fill(b.seq_lens, 1, width + 1)

    # ---- one check ---------------------------------------------------------------------------
    def check(self, reqs: list[Request], label: str, s: int, seed: int = 0) -> RunnerCheck:
        """The iteration for ``reqs`` with ``s`` drafts: eager, per-phase and (if it fits) graph."""
        self._prepare(reqs)
        problems = []
        fits = len(reqs) <= self.fused.sizes[-1]
        ok, why = self.fused.can_run(reqs)
        if ok != fits:
            problems.append(f"can_run {'accepted' if ok else 'refused'} bs {len(reqs)} (largest graph "
                            f"{self.fused.sizes[-1]}){': ' + why if why else ''}")
        sampled = any(not r.params.greedy for r in reqs)
        start = self.snapshot()
        try:
            eager = self._eager(reqs, s, sampled)
            self.greedy_accepts.update(a for r, a in zip(reqs, eager.accept) if r.params.greedy)
            eager_state = self.snapshot()
            self.restore(start)
            phased = self.worker.speculate(reqs, s)
            problems += self._compare_phased(reqs, eager, eager_state, phased, self.snapshot(), start)
            self.restore(start)
            if ok and fits:
                graph, err = self._graph(reqs, s, sampled, seed)
                problems += [err] if err else []
                problems += self._compare(eager, graph, eager_state, self.snapshot())
        finally:
            self.restore(start)  # the host's view of the requests never moved: neither may the device's
        return RunnerCheck(FUSED_ITERATION, label, not problems, "; ".join(problems[:3]))

    def _compare_phased(self, reqs: list[Request], eager: IterResult, est: FusedState, phased: SpecStepResult,
                        pst: FusedState, start: FusedState) -> list[str]:
        """The fused body against what the host knows and against the per-phase path: every
        row's state as the host will take it (N + accept, the last token, the RNG offset one
        further); for greedy rows, the per-phase path's tokens, draft feature and the KV of the
        row's committed positions (below N + accept - 1) in both models."""
        tol = TOL[self.dtype]
        table = self.eng.req_pool.req_to_token
        for i, r in enumerate(reqs):
            acc, toks = eager.accept[i], eager.tokens[i]
            want = (r.seq_len + acc, toks[-1], int(start.row("offset")[r.row]) + 1)
            got = tuple(int(est.row(f)[r.row]) for f in ("seq_len", "bonus", "offset"))
            if got != want:
                return [f"request {i}: RowState (seq_len, bonus, offset) {got} after the iteration, the host expects {want}"]
            if not r.params.greedy:
                continue
            if (phased.accept_lens[i], phased.tokens[i]) != (acc, toks):
                return [f"greedy request {i}: per-phase path accepted {phased.tokens[i]} != fused {toks}"]
            err = mismatch(est.next_hidden[r.row], pst.next_hidden[r.row], tol)
            if err:
                return [f"greedy request {i}: next_hidden != per-phase path's: {err}"]
            if est.layer_states is not None and pst.layer_states is not None:
                err = mismatch(est.layer_states[r.row], pst.layer_states[r.row], tol)
                if err:
                    return [f"greedy request {i}: MTP module states != per-phase path's: {err}"]
            slots = table[r.row, : r.seq_len + acc - 1].long()  # past them: rejected rows (junk)
            for who, ka, kb in zip(("target", "draft"), est.kv, pst.kv):
                bad = next((e for a, b in zip(ka, kb) if (e := mismatch(a[slots], b[slots], tol))), "")
                if bad:
                    return [f"greedy request {i}: {who} KV != per-phase path's: position {bad}"]
        return []

    def _compare(self, eager: IterResult, graph: IterResult, est: FusedState, gst: FusedState) -> list[str]:
        tol = TOL[self.dtype]
        problems = []
        if graph != eager:
            problems.append(f"accepted {graph.accept} {graph.tokens} != eager {eager.accept} {eager.tokens}")
        pad = dict(PADDING_ROW)
        for name, a, b in zip(ROW_FIELDS, gst.rows, est.rows):
            if name in pad and int(a[0]) != pad[name]:
                problems.append(f"padding row 0 left at {name} {int(a[0])} (not reset to {pad[name]})")
            elif not torch.equal(a, b):
                row = int((a != b).nonzero()[0])
                problems.append(f"RowState.{name} row {row}: {a[row].item()} != eager {b[row].item()}")
        err = mismatch(gst.next_hidden, est.next_hidden, tol)
        if err:
            problems.append(f"next_hidden {err}")
        if gst.layer_states is not None and est.layer_states is not None:
            err = mismatch(gst.layer_states, est.layer_states, tol)
            if err:
                problems.append(f"MTP module states {err}")
        problems.extend(kv_problems(gst.kv, est.kv, tol))
        return problems

    # ---- cross replay (real CUDA graphs) -----------------------------------------------------------
    def cross_replay(self, reqs: list[Request], label: str, s: int) -> RunnerCheck:
        """Launch the iteration for ``reqs``, replay every other graph, launch it again (as
        overlap does, before reading the first), then read the first: its ``out`` buffer and the
        host's copy must hold what an iteration read at once holds. Graphs of one pool can be
        given blocks that another graph used only for temporaries; ``out`` is allocated outside
        the pool, and each launch copies it into its own host slot."""
        self._prepare(reqs)
        f = self.fused
        sampled = any(not r.params.greedy for r in reqs)
        start = self.snapshot()
        problems: list[str] = []
        try:
            want = f.launch(reqs, s, sampled).wait()
            self.restore(start)
            g = f.graph_for(s, sampled, len(reqs))
            inf = f.launch(reqs, s, sampled)
            held = g.out.clone()
            for name, handle in self._other_graphs(g):
                handle.replay()
                if self.eng.device.type == "cuda":
                    torch.cuda.synchronize()
                if not torch.equal(g.out, held):
                    problems.append(f"the fused iteration's out buffer was overwritten by a replay of {name}")
                    break
            nxt = f.launch(reqs, s, sampled)
            got = inf.wait()
            nxt.wait()
            if got != want:
                problems.append(f"results read after the next launch {got} != read at once {want}")
        finally:
            self.restore(start)
        return RunnerCheck(FUSED_ITERATION, f"{label}, cross-replay", not problems, "; ".join(problems[:2]))

    def _other_graphs(self, mine: IterGraph) -> Iterator[tuple[str, Any]]:
        """(name, handle) of every captured graph but ``mine``. Other fused graphs get padding
        rows only (row 0, the scratch slot); phase graphs replay their last inputs."""
        for model, runner in zip(("target", "draft"), self.models):
            for mode, phase in graphs_of(runner).items():
                for bs, handle in phase.graphs.items():
                    yield f"the {model} {mode.name} graph bs {bs}", handle
        chain = self.proposer.captured_chain
        if chain is not None:
            for bs, handle in chain.graphs.items():
                yield f"the draft chain graph bs {bs}", handle
        for (s, sampled, bs), other in list(self.fused.graphs.items()):
            if other is not mine and other.graph is not None:
                other.rows.zero_()
                yield f"the fused iteration graph (S {s}, sampled {sampled}, bs {bs})", other.graph

    def advance(self) -> None:
        """One iteration for every running request through ``Engine.step`` (more requests than
        the largest graph: the per-phase path, which re-admits the rows); finished ones leave."""
        self.eng.step()
        self.reqs = [r for r in self.reqs if not r.finished]


def run_fused_checks(
    backend: str,
    device: str,
    *,
    tier: str = "full",
    dtype: str = "float32",
    on_check: Callable[[RunnerCheck], None] | None = None,
) -> list[RunnerCheck]:
    """Every check of the fused iteration column for ``backend`` (``HEADS[tier]`` x
    ``ROUNDS[tier]`` x pools x batches; on CUDA a cross-replay check per pool and round)."""
    results: list[RunnerCheck] = []
    dev = torch.device(device)
    for kind in HEADS[tier]:
        with tempfile.TemporaryDirectory(prefix="updraft-kit-") as tmp:
            rig = FusedRig(backend, dev, dtype, Path(tmp) / "head", kind)
            for rnd in range(ROUNDS[tier]):
                s = rig.steps[rnd % len(rig.steps)]
                for pool_name in FUSED_POOLS:
                    pool = [r for r in rig.reqs if r.params.greedy] if pool_name == "greedy" else list(rig.reqs)
                    for j, reqs in enumerate(rotated_batches(pool, tier)):
                        label = f"{kind}, round {rnd}, S {s}, {pool_name}, bs {len(reqs)}"
                        checks = [lambda: rig.check(reqs, label, s, seed=10 * rnd + j)]  # noqa: B023 - called now
                        if dev.type == "cuda" and j == 0:
                            checks.append(lambda: rig.cross_replay(reqs, label, s))  # noqa: B023
                        for run in checks:
                            try:
                                chk = run()
                            except Exception as exc:  # noqa: BLE001 - a raising path is a failed check
                                chk = RunnerCheck(FUSED_ITERATION, label, False,
                                                  f"raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                            results.append(chk)
                            if on_check is not None:
                                on_check(chk)
                if rnd + 1 < ROUNDS[tier]:
                    rig.advance()
    return results

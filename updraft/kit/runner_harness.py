"""Production graph runners against their eager paths, phase by phase, on a tiny random engine.

The real ``Engine`` (tiny target + EAGLE head, ``updraft.kit.tiny``) captures its phases as in
production. Each check drives ONE production entry point on a batch of running requests twice
from the same state -- every graph detached (eager), then only the graph under test attached --
and compares:

* every model forward of the two runs, row by row (logits, hidden, aux hidden), in order;
* the phase's result (drafts and their distributions, accepted tokens, the next draft token
  and feature) and the state left behind (both KV pools on every slot but the scratch slot 0,
  the proposer's per-row buffers, an MTP head's per-row module states);
* which path ran: the graph for batch sizes up to the largest captured one, an eager fallback
  above it (failure class 2: a consumer must take tensors from the path that ran);
* on real CUDA graphs, that a graph's outputs survive the replays of every other graph, as
  ``PhaseGraphRunner`` promises (``cross_replay``; it names the graph that overwrote them and
  whether it belongs to the same model's memory pool or to the other model's).

Columns (entry point -> graph under test):

* ``draft decode``: ``DraftModelProposer.propose`` -> the per-step DRAFT_DECODE graph (the path
  sampling drafts take; the chain is detached);
* ``draft chain``: ``propose`` -> the chained S-1 step graph (greedy drafts);
* ``draft extend v1`` / ``v2``: ``after_verify`` with chosen accept lengths 1..ndt -> the
  DRAFT_EXTEND / DRAFT_EXTEND_V2 graph (v1 and v2 engines);
* ``verify``: ``SpecWorker.step`` -> the TARGET_VERIFY graph;
* ``fused iteration``: ``FusedIteration.launch`` -> the whole iteration's graph, on an engine of
  its own (``fused_harness``; ``run_runner_checks`` hands it over).

Batches are replayed in the order 4, 3, 5, 2, 1 against graphs of bs 4, 2, 1: a full graph, a
padded replay right after a fuller one on the same graph (stale columns, class 10), a fallback,
and the smaller graphs; and every graph's static inputs are poisoned before its replay. A third
of the requests sample (seeded generators, restored between the runs; they also ask for
logprobs, read after the draft extend ran), the rest are greedy; one request sits at the end of
its table row (class 11). The full tier runs an EAGLE-1, an EAGLE-3 and an MTP head (two
modules, cycled at S = 3; one DRAFT_DECODE graph per step: the ``draft decode`` column attaches
them all and poisons the last), two rounds.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from updraft.batch import ForwardMode
from updraft.engine.engine import Engine
from updraft.engine.request import Request
from updraft.kit.graph_harness import PER_REPLAY_FIELDS, check_invariants, poison_static_inputs
from updraft.kit.matrix import FUSED_ITERATION, HEADS, PRODUCTION_COLUMNS, ROUNDS, SUBSET_SIZES
from updraft.kit.tiny import tiny_engine
from updraft.models.mtp import MtpHead
from updraft.runtime.model_runner import ModelRunner
from updraft.sampling_params import SamplingParams

COLUMNS = PRODUCTION_COLUMNS
CAPTURE_MAX_BS = 4
TOL = {"float32": 1e-4, "bfloat16": 2e-2}
#: Prompt lengths (around the 16-token pages; 62 = the tiny engine's max_model_len - 2, so the
#: first speculative step of that request needs the table's last columns: failure class 11) and
#: which requests sample (the rest are greedy; sampling ones also ask for logprobs).
PROMPT_LENS = (15, 62, 16, 17, 31, 33, 5, 1, 40)
SAMPLING = (False, False, True, False, True, False, True, False, False)


@dataclass
class RunnerCheck:
    """One graph-vs-eager comparison of one column."""

    column: str
    label: str
    ok: bool
    detail: str = ""

    def describe(self) -> str:
        return f"{self.column} [{self.label}]: {self.detail}"


@dataclass
class _Record:
    runner: str
    mode: ForwardMode
    bs: int
    graph: bool
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


class _Recorder:
    """Wraps ``ModelRunner.forward`` (instance attribute) and clones every output at once:
    graph outputs are views that the next replay overwrites (failure class 7)."""

    def __init__(self, runner: ModelRunner, name: str, sink: list[_Record]) -> None:
        self.runner, self.name, self.sink = runner, name, sink
        self.inner = runner.forward

    def __call__(self, batch: Any) -> Any:
        out = self.inner(batch)
        n = batch.real_batch_size if batch.real_batch_size is not None else batch.batch_size  # a replay view is padded
        rec = _Record(self.name, batch.mode, n, bool(out.graph))
        for key in ("logits", "hidden", "aux_hidden"):
            t = getattr(out, key)
            if t is not None:
                rec.tensors[key] = t.detach().clone()
        self.sink.append(rec)
        return out


def mismatch(a: torch.Tensor, b: torch.Tensor, tol: float) -> str:
    """'' when ``a`` matches ``b`` (relative to b's scale), else where it differs first."""
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    if a.numel() == 0:
        return ""
    if not a.is_floating_point():
        bad = (a != b).nonzero()
        return f"differs at {bad[0].tolist()}: {a[tuple(bad[0])].item()} != {b[tuple(bad[0])].item()}" if bad.numel() else ""
    diff = (a.double() - b.double()).abs()
    scale = b.double().abs().max().item() or 1.0
    if not bool(torch.isfinite(a).all()) or diff.max().item() > tol * scale:
        row = int(diff.flatten(1).max(1).values.argmax()) if diff.dim() > 1 else int(diff.argmax())
        return f"row {row}: max |diff| {diff.max().item() / scale:.2e} of scale (tol {tol:.0e})"
    return ""


def kv_problems(kv_a: Any, kv_b: Any, tol: float) -> list[str]:
    """Both models' KV pools (per model: K of every layer, then V) compared on every slot but
    the scratch slot 0 (padded rows write there); the first mismatching layer per model."""
    problems = []
    for who, ka, kb in zip(("target", "draft"), kv_a, kv_b):
        for i, (a, b) in enumerate(zip(ka, kb)):
            err = mismatch(a[1:], b[1:], tol)
            if err:
                problems.append(f"{who} KV {'k' if i < len(ka) // 2 else 'v'} layer {i % (len(ka) // 2)}: slot {err}")
                break
    return problems


def layer_states(proposer: Any) -> torch.Tensor | None:
    """An MTP head's per-row module states (what its next extend reads), else None."""
    head = proposer.runner.model
    return head.layer_states if isinstance(head, MtpHead) else None


def graphs_of(runner: ModelRunner) -> dict[ForwardMode, Any]:
    """The fixed-width phase graphs ``runner`` captured, by mode."""
    return {m: g for m in ForwardMode if (g := runner.graph(m)) is not None}


class RunnerRig:
    """A tiny engine with its graphs held aside, requests prefilled, and the snapshot/compare
    machinery. Between checks every graph is detached."""

    def __init__(self, backend: str, draft_extend: str, device: torch.device, dtype: str, head_dir: Path,
                 columns: list[str] | None = None, kind: str = "eagle") -> None:
        self.dtype = dtype
        # Capture only what the columns test (--disable-graph-phase: the production switch).
        need = set(columns or COLUMNS)
        phases = {"target_verify": {"verify"}, "draft_decode": {"draft decode", "draft chain"},
                  "draft_extend": {"draft extend v1", "draft extend v2"}}
        disabled = [p for p, cols in phases.items() if not cols & need]
        # Adaptive S off: each column's graph has one width (S + 1), and an S = 0 step leaves the
        # draft behind (proposer lag that snapshot/restore does not cover: a check run twice from
        # one state would record the lag twice).
        self.eng: Engine = tiny_engine(backend, draft_extend, device, head_dir, kind=kind, dtype=dtype,
                                       capture_max_bs=CAPTURE_MAX_BS, disable_graph_phase=disabled, adaptive=False)
        spec = self.eng.spec
        assert spec is not None
        self.worker = spec
        self.proposer: Any = spec.proposer
        self.target: ModelRunner = self.eng.runner
        self.draft: ModelRunner = self.proposer.runner
        self.held = {"target": graphs_of(self.target), "draft": graphs_of(self.draft), "chain": self.proposer.captured_chain}
        self._detach()
        self.records: list[_Record] = []
        self.target.forward = _Recorder(self.target, "target", self.records)  # type: ignore[method-assign]
        self.draft.forward = _Recorder(self.draft, "draft", self.records)  # type: ignore[method-assign]
        self.reqs: list[Request] = prefill_requests(self.eng, logprobs=True)
        self.records.clear()

    # ---- graphs and state --------------------------------------------------------------
    def _detach(self) -> None:
        self.target.select_graphs(())
        self.draft.select_graphs(())
        self.proposer.enable_chain(False)

    def captured(self, column: str) -> bool:
        mode = COLUMNS[column][1]
        if column == "draft chain":
            return self.held["chain"] is not None
        return mode in (self.held["target"] if column == "verify" else self.held["draft"])

    def _attach(self, column: str) -> Any:
        """Attach only the graph under test; return it."""
        mode = COLUMNS[column][1]
        if column == "draft chain":
            self.proposer.enable_chain(True)
            return self.held["chain"]
        where, runner = ("target", self.target) if column == "verify" else ("draft", self.draft)
        runner.select_graphs({mode})
        return self.held[where][mode]

    def snapshot(self) -> dict[str, Any]:
        p = self.proposer
        return {
            "kv": [[t.clone() for t in r.kv_pool.k_buffer + r.kv_pool.v_buffer] for r in (self.target, self.draft)],
            "next_token": p.next_token.clone(),
            "next_hidden": None if p.next_hidden is None else p.next_hidden.clone(),
            "next_q": None if p.next_q is None else p.next_q.clone(),
            "layer_states": None if (ls := layer_states(p)) is None else ls.clone(),
            "gens": [None if r.generator is None else r.generator.get_state() for r in self.reqs],
        }

    def restore(self, s: dict[str, Any]) -> None:
        for runner, saved in zip((self.target, self.draft), s["kv"]):
            for t, v in zip(runner.kv_pool.k_buffer + runner.kv_pool.v_buffer, saved):
                t.copy_(v)  # in place: backends and captured graphs hold these tensors
        p = self.proposer
        p.next_token.copy_(s["next_token"])
        if s["next_hidden"] is not None:
            p.next_hidden.copy_(s["next_hidden"])
        p.next_q = None if s["next_q"] is None else s["next_q"].clone()
        if s["layer_states"] is not None:
            layer_states(p).copy_(s["layer_states"])  # type: ignore[union-attr]
        for r, g in zip(self.reqs, s["gens"]):
            if g is not None:
                r.generator.set_state(g)  # type: ignore[union-attr]

    def _poison(self, graph: Any) -> None:
        table = self.eng.req_pool.req_to_token
        rows, width = int(table.shape[0]), int(table.shape[1])
        slots = min(self.draft.kv_pool.num_slots, self.target.kv_pool.num_slots)
        vocab = self.eng.model_config.vocab_size
        if hasattr(graph, "inputs"):  # the draft chain: per-replay fields only (see PER_REPLAY_FIELDS)
            for i, st in enumerate(graph.inputs):
                poison_static_inputs(st, slots, rows, width, seed=17 + i, fields=PER_REPLAY_FIELDS, vocab=vocab, max_row=1)
        else:
            poison_static_inputs(graph.static, slots, rows, width, seed=17, vocab=vocab, max_row=graph.phase.width)

    def _invariants(self, graph: Any, bs: int) -> str:
        sizes = [s for s in graph.sizes if s >= bs]
        if not sizes:
            return ""
        captured = graph.batches[min(sizes)]
        table = self.eng.req_pool.req_to_token
        for b in captured if isinstance(captured, list) else [captured]:
            err = check_invariants(b.attn_metadata, b.attn_backend.kv_pool.num_slots, int(table.shape[0]), b.num_tokens)
            if err:
                return err
        return ""

    # ---- one check -------------------------------------------------------------------------
    def check(self, column: str, reqs: list[Request], label: str, seed: int) -> RunnerCheck:
        """Run ``column``'s entry point on ``reqs`` eagerly, then with its graph; compare."""
        ok = self.eng.allocator.ensure_batch([r.row for r in reqs], [self.eng.scheduler.decode_len(r) for r in reqs])  # type: ignore[misc]
        assert ok, "the tiny engine ran out of KV pages"
        entry = self._entry(column, reqs, seed)
        start = self.snapshot()
        try:
            self.records.clear()
            eager_result = entry()
            eager_records = list(self.records)
            eager_state = self.snapshot()
            self.restore(start)
            graph = self._attach(column)
            self._poison(graph)
            chain_before = dict(self.proposer.chain_counts)
            self.records.clear()
            graph_result = entry()
        except BaseException:
            self.restore(start)  # a raising path must not leave the next check a broken state
            raise
        finally:
            self._detach()
        graph_records = list(self.records)
        graph_state = self.snapshot()
        self.restore(eager_state)
        problems = self._compare(column, reqs, eager_records, graph_records, eager_result, graph_result, eager_state, graph_state, chain_before)
        bs = len(reqs)
        inv = self._invariants(graph, bs)
        if inv:
            problems.append(f"metadata after replay-init: {inv}")
        return RunnerCheck(column, label, not problems, "; ".join(problems[:3]))

    def cross_replay(self, column: str, bs: int, label: str) -> RunnerCheck:
        """Real CUDA graphs only: the output of ``column``'s graph (last replayed at ``bs``) must
        survive a replay of every OTHER captured graph, of either model, as the runner promises
        ("valid until the next replay of the same graph"). Graphs of one model share a memory
        pool (the target's and the draft's must not): a graph captured later can be given blocks
        an earlier graph only used for temporaries, and that graph's replays then overwrite
        them. The emulator has no pools, so there this always passes."""
        mine = self._held_graph(column)
        size = min(s for s in mine.sizes if s >= bs)
        held = mine.graphs[size].output
        tensors = [held] if isinstance(held, torch.Tensor) else [t for t in (held.logits, held.hidden, held.aux_hidden) if t is not None]
        state = self.snapshot()  # other graphs rewrite KV slots of their last batch: put them back
        others = [("target", g) for g in self.held["target"].values()] + [("draft", g) for g in self.held["draft"].values()]
        if self.held["chain"] is not None:
            others.append(("draft", self.held["chain"]))
        own = "target" if column == "verify" else "draft"
        problems = []
        for model, g in others:
            if g is mine:
                continue
            for other_bs, handle in g.graphs.items():
                before = [t.clone() for t in tensors]
                handle.replay()
                if self.target.device.type == "cuda":
                    torch.cuda.synchronize()
                if any(not torch.equal(a, b) for a, b in zip(tensors, before)):
                    where = "same model: one memory pool" if model == own else "the other model: pools must not be shared"
                    name = "draft chain" if g is self.held["chain"] else g.phase.mode.name
                    problems.append(f"the {column} graph's outputs were overwritten by a replay of the {name} graph bs {other_bs} ({where})")
        self.restore(state)
        return RunnerCheck(column, f"{label}, cross-replay", not problems, "; ".join(problems[:2]))

    def _held_graph(self, column: str) -> Any:
        if column == "draft chain":
            return self.held["chain"]
        return self.held["target" if column == "verify" else "draft"][COLUMNS[column][1]]

    def _entry(self, column: str, reqs: list[Request], seed: int) -> Callable[[], Any]:
        s = self.worker.num_steps
        if column in ("draft decode", "draft chain"):
            return lambda: self.proposer.propose(reqs, s)
        if column == "verify":
            return lambda: self.worker.step(reqs)
        # Draft extend after a verify step with chosen accept lengths 1..ndt, random emitted
        # tokens and target features: the inputs after_verify gets from SpecWorker.step.
        ndt = self.worker.ndt
        dev = self.target.device
        gen = torch.Generator().manual_seed(seed)
        bsz = len(reqs)
        emitted = torch.randint(0, self.eng.model_config.vocab_size, (bsz, ndt), generator=gen).to(dev)
        # Accept lengths cover 1..ndt across checks, but a batch rarely reaches ndt everywhere:
        # (2i + seed) % ndt + 1 leaves the packed v1 batch below its captured width now and then.
        accept = torch.tensor([(2 * i + seed) % ndt + 1 for i in range(bsz)]).to(dev)
        feat = self.eng.model_config.hidden_size * max(1, len(self.eng.model.aux_layers))
        hidden = torch.randn(bsz * ndt, feat, generator=gen).to(device=dev, dtype=self.target.dtype)
        seq_lens = [r.seq_len for r in reqs]
        return lambda: self.proposer.after_verify(reqs, seq_lens, emitted, accept, hidden)

    def _compare(self, column: str, reqs: list[Request], er: list[_Record], gr: list[_Record], eres: Any, gres: Any,
                 est: dict[str, Any], gst: dict[str, Any], chain_before: dict[str, int]) -> list[str]:
        tol = TOL[self.dtype]
        problems: list[str] = []
        mode = COLUMNS[column][1]
        bs = len(reqs)
        expect_graph = bs <= CAPTURE_MAX_BS
        if column == "draft chain":
            greedy = all(r.params.greedy for r in reqs)
            ran = self.proposer.chain_counts.get("chain graph", 0) > chain_before.get("chain graph", 0)
            if ran != (expect_graph and greedy):
                problems.append(f"chain graph {'ran' if ran else 'did not run'} at bs {bs} ({self.proposer.chain_counts})")
        else:
            tested = [r for r in gr if r.mode == mode and r.runner == ("target" if column == "verify" else "draft")]
            if not tested:
                problems.append(f"no {mode.name} forward ran")
            for r in tested:
                if r.graph != expect_graph:
                    counts = (self.target if column == "verify" else self.draft).path_counts
                    why = [k for k in counts if k.startswith(f"{mode.name} eager")]
                    problems.append(f"{mode.name} at bs {bs}: graph {'ran' if r.graph else 'did not run'} {why[-1:] or ''}")
                    break
            if len(er) != len(gr) or any((a.runner, a.mode, a.bs) != (b.runner, b.mode, b.bs) for a, b in zip(er, gr)):
                problems.append(f"forward sequences differ: eager {[(r.mode.name, r.bs) for r in er]} graph {[(r.mode.name, r.bs) for r in gr]}")
            else:
                for i, (a, b) in enumerate(zip(gr, er)):
                    for key in sorted(set(a.tensors) | set(b.tensors)):
                        if key not in a.tensors or key not in b.tensors:
                            problems.append(f"forward {i} {a.mode.name}: {key} only on one path")
                            continue
                        err = mismatch(a.tensors[key], b.tensors[key], tol)
                        if err:
                            problems.append(f"forward {i} {a.mode.name} {key} {err}")
        problems += self._compare_results(eres, gres, tol)
        for name in ("next_token", "next_hidden", "next_q", "layer_states"):
            a, b = gst[name], est[name]
            if (a is None) != (b is None):
                problems.append(f"{name}: set on one path only")
            elif a is not None:
                err = mismatch(a, b, tol)
                if err:
                    problems.append(f"{name} {err}")
        problems.extend(kv_problems(gst["kv"], est["kv"], tol))
        return problems

    @staticmethod
    def _compare_results(eres: Any, gres: Any, tol: float) -> list[str]:
        if eres is None and gres is None:
            return []
        out = []
        if hasattr(eres, "tokens") and isinstance(eres.tokens, torch.Tensor):  # Drafts
            err = mismatch(gres.tokens, eres.tokens, 0.0)
            if err:
                out.append(f"draft tokens {err}")
            if (eres.q is None) != (gres.q is None):
                out.append("draft distributions on one path only")
            elif eres.q is not None:
                err = mismatch(gres.q, eres.q, tol)
                if err:
                    out.append(f"draft distributions {err}")
        elif hasattr(eres, "accept_lens"):  # SpecStepResult
            if gres.accept_lens != eres.accept_lens or gres.tokens != eres.tokens:
                out.append(f"verify: accepted {gres.accept_lens} {gres.tokens} != eager {eres.accept_lens} {eres.tokens}")
            elif (eres.logprobs is None) != (gres.logprobs is None):
                out.append("verify: logprobs on one path only")
            elif eres.logprobs is not None:
                # Read after the draft extend ran: a graph pool shared with the draft would
                # have overwritten the target's logits by then.
                a = torch.tensor([e["logprob"] for row in gres.logprobs for e in row], dtype=torch.float64)
                b = torch.tensor([e["logprob"] for row in eres.logprobs for e in row], dtype=torch.float64)
                err = mismatch(a, b, tol)
                if err:
                    out.append(f"verify logprobs {err}")
        return out

    def advance(self) -> None:
        """One eager speculative iteration for every running request (new lengths); requests
        that reached the context limit leave."""
        self.records.clear()
        self.eng.step()
        self.records.clear()
        self.reqs = [r for r in self.reqs if not r.finished]


def prefill_requests(eng: Engine, *, logprobs: bool) -> list[Request]:
    """Add the ``PROMPT_LENS`` requests (``SAMPLING`` ones seeded, asking for logprobs when
    ``logprobs``), run the engine until none is in prefill; the running requests."""
    gen = torch.Generator().manual_seed(3)
    for i, (n, sampling) in enumerate(zip(PROMPT_LENS, SAMPLING)):
        params = SamplingParams(temperature=0.8 if sampling else 0.0, seed=100 + i if sampling else None,
                                max_tokens=400, ignore_eos=True, logprobs=2 if sampling and logprobs else None)
        ids = torch.randint(0, eng.model_config.vocab_size, (n,), generator=gen).tolist()
        eng.add_request(ids, params, detokenize=False)
    while any(r.in_prefill for r in eng.requests.values()):
        eng.step()
    return list(eng.scheduler.running)


def subsets(reqs: list[Request], column: str, tier: str = "full") -> list[list[Request]]:
    """Batches in the order of ``SUBSET_SIZES[tier]``; the chain column takes greedy requests
    only (sampling drafts never take the chain), the others mix both kinds."""
    return rotated_batches([r for r in reqs if r.params.greedy] if column == "draft chain" else list(reqs), tier)


def rotated_batches(pool: list[Request], tier: str = "full") -> list[list[Request]]:
    """Batches of ``SUBSET_SIZES[tier]`` requests of ``pool`` (sizes above the pool's are left
    out), the i-th starting at the pool's i-th request."""
    out = []
    for i, n in enumerate(SUBSET_SIZES[tier]):
        if n <= len(pool):
            rot = i % len(pool)
            out.append((pool[rot:] + pool[:rot])[:n])
    return out


def run_runner_checks(
    backend: str,
    device: str,
    columns: list[str],
    *,
    tier: str = "full",
    dtype: str = "float32",
    on_check: Callable[[RunnerCheck], None] | None = None,
) -> dict[str, list[RunnerCheck]]:
    """All checks of ``columns`` for ``backend`` (columns whose graph the backend cannot capture
    are left out: the caller marks them '—'); ``ROUNDS[tier]`` rounds, one eager iteration apart."""
    results: dict[str, list[RunnerCheck]] = {c: [] for c in columns}
    if FUSED_ITERATION in columns:  # an engine of its own (fused_harness)
        from updraft.kit.fused_harness import run_fused_checks

        results[FUSED_ITERATION] = run_fused_checks(backend, device, tier=tier, dtype=dtype, on_check=on_check)
        columns = [c for c in columns if c != FUSED_ITERATION]
    dev = torch.device(device)
    for kind, version in [(k, v) for k in HEADS[tier] for v in ("v2", "v1")]:
        cols = [c for c in columns if COLUMNS[c][0] == version]
        if not cols:
            continue
        with tempfile.TemporaryDirectory(prefix="updraft-kit-") as tmp:
            rig = RunnerRig(backend, version, dev, dtype, Path(tmp) / "head", cols, kind)
            for rnd in range(ROUNDS[tier]):
                for col in cols:
                    if not rig.captured(col):
                        continue
                    for j, reqs in enumerate(subsets(rig.reqs, col, tier)):
                        label = f"{kind}, round {rnd}, bs {len(reqs)}"
                        checks = [lambda: rig.check(col, reqs, label, seed=10 * rnd + j)]  # noqa: B023 - called now
                        if dev.type == "cuda" and j == 0:
                            checks.append(lambda: rig.cross_replay(col, len(reqs), label))  # noqa: B023
                        for run in checks:
                            try:
                                chk = run()
                            except Exception as exc:  # noqa: BLE001 - a raising path is a failed check
                                rig._detach()
                                chk = RunnerCheck(col, label, False, f"raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                            results[col].append(chk)
                            if on_check is not None:
                                on_check(chk)
                if rnd + 1 < ROUNDS[tier]:
                    rig.advance()
    return results

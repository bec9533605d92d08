"""Runs one model (target or draft) over forward batches: its KV pool, attention backend and the
CUDA graphs of its phases (captured by ``capture``, replayed by ``forward`` when ``can_run``
allows). Builds ``ForwardBatch`` objects from scheduled requests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

import torch

from updraft.attention import create_backend
from updraft.attention.base import AttentionBackend
from updraft.batch import CaptureHidden, FeatureKind, ForwardBatch, ForwardMode, LogitRows
from updraft.memory.pools import KVPool, ReqToTokenPool
from updraft.models.llama import ModelOutput
from updraft.ops.dense import calibrate as calibrate_dense
from updraft.runtime.graphs.device_graph import new_pool
from updraft.runtime.graphs.phase_graph import BatchShape, CaptureStats, PhaseGraphRunner, PhaseSpec
from updraft.runtime.phase_inputs import PhaseInputs


class ModelRunner:
    """One model with its own KV pool (sharing ``req_to_token`` with every other runner)."""

    def __init__(
        self,
        model: torch.nn.Module,
        req_pool: ReqToTokenPool,
        num_pages: int,
        page_size: int,
        backend_name: str,
    ) -> None:
        cfg = model.config
        w = next(model.parameters())
        self.model = model
        self.config = cfg
        self.device = w.device
        self.dtype = w.dtype
        if self.device.type == "cpu" and self.dtype == torch.float32:
            # which call streams a CPU weight fastest depends on the machine's BLAS (ops/dense.py)
            calibrate_dense([p for p in model.parameters() if p.dim() == 2])
        self.req_pool = req_pool
        self.kv_pool = KVPool(cfg.num_layers, num_pages, page_size, cfg.num_kv_heads, cfg.head_dim, self.dtype, self.device,
                              v_head_dim=cfg.v_head_dim, shared_kv=cfg.shared_kv)
        self.backend: AttentionBackend = create_backend(
            backend_name, self.kv_pool, req_pool.req_to_token, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.attn_scale
        )
        self.backend_name = backend_name
        #: fixed-width phases' runners by mode, one per captured width (the per-phase speculative
        #: worker verifies at S + 1 for every S adaptive speculation may choose), narrowest first
        self._graphs: dict[ForwardMode, list[PhaseGraphRunner]] = {}
        #: EXTEND (prefill) runners, narrowest token width first: a short prompt replays the
        #: narrowest graph it fits instead of paying ~1000 eager launches (host-bound).
        self._prefill_graphs: list[PhaseGraphRunner] = []
        self._pool: Any = None  # one graph memory pool per model, created at the first capture
        self._pool_made = False
        #: phases whose captured graph may replay (None: all); see ``select_graphs``
        self._selected: frozenset[ForwardMode] | None = None
        #: the inputs of each mode's eager forwards (graphs keep those they were captured with)
        self._inputs: dict[ForwardMode, PhaseInputs] = {}
        #: mode -> (serial, graph) of the batch staged last (a batch is valid until the next)
        self._staged: dict[ForwardMode, tuple[int, PhaseGraphRunner | None]] = {}
        self._serial = 0
        #: "MODE graph" / "MODE eager: <reason>" at staging -> count, for logs and benchmarks.
        self.path_counts: Counter[str] = Counter()

    # ---- batch construction ------------------------------------------------------------
    def make_batch(
        self,
        mode: ForwardMode,
        token_ids: Sequence[int] | torch.Tensor,
        rows: Sequence[int],
        seq_lens: Sequence[int],
        extend_lens: Sequence[int],
        *,
        logits: LogitRows | torch.Tensor = "last",
        stride: int = 0,
        capture_hidden: CaptureHidden = CaptureHidden.NONE,
        feature: torch.Tensor | None = None,
        feature_kind: FeatureKind = FeatureKind.NONE,
        draft_step: int = 0,
    ) -> ForwardBatch:
        """Stage one forward of ``len(rows)`` requests (request ``i``: ``extend_lens[i]`` new
        tokens, KV length ``seq_lens[i]`` once written) into this runner's inputs of ``mode``:
        the captured graph's when one can replay it (padded to its batch size), else the eager
        ones. ``logits``: which rows get logits, or a device tensor of one chosen row per
        request. ``feature``: the draft's per-token input rows (device; ``feature_kind`` says
        which; ignored without rows). ``draft_step``: a multi-layer draft's chain step (selects the
        captured graph of that step). The batch is valid until the next ``make_batch`` of the
        same mode (``forward`` checks)."""
        if feature is None:
            feature_kind = FeatureKind.NONE
        n = len(rows)
        ext_max = max(extend_lens) if n else 0
        kind: LogitRows = "select" if isinstance(logits, torch.Tensor) else logits
        shape = BatchShape(mode, n, ext_max, stride, capture_hidden, feature_kind, kind, tokens=sum(extend_lens),
                           draft_step=draft_step)
        graph = self._pick_graph(shape)
        if graph is not None:
            batch = graph.stage(token_ids if isinstance(token_ids, torch.Tensor) else list(token_ids), list(rows), list(seq_lens),
                                list(extend_lens), self.req_pool.req_to_token,
                                select=logits if isinstance(logits, torch.Tensor) else None, feature=feature)
        else:
            batch = self._stage_eager(mode, token_ids, list(rows), list(seq_lens), list(extend_lens), logits, stride,
                                      capture_hidden, feature, feature_kind)
            batch.draft_step = draft_step
        self._serial += 1
        batch.stage_serial = self._serial
        self._staged[mode] = (self._serial, graph)
        return batch

    def _stage_eager(self, mode: ForwardMode, token_ids: Sequence[int] | torch.Tensor, rows: list[int], seq_lens: list[int],
                     extend_lens: list[int], logits: LogitRows | torch.Tensor, stride: int, capture_hidden: CaptureHidden,
                     feature: torch.Tensor | None, feature_kind: FeatureKind) -> ForwardBatch:
        """The eager path of ``make_batch``: the same builder into this mode's eager inputs
        (no padding); device-resident inputs are used as they are."""
        n, t = len(rows), sum(extend_lens)
        kind: LogitRows = "select" if isinstance(logits, torch.Tensor) else logits
        rows_out = t if kind == "all" else (0 if kind == "none" else n)
        inputs = self._eager_inputs(mode, t, n, rows_out, 0)
        on_device = isinstance(token_ids, torch.Tensor)
        staged = inputs.write(None if on_device else list(token_ids), rows, seq_lens, extend_lens, kind, pad_to=n, width=1,
                              fill=self.backend.fill_seq_len)
        inputs.gather_slots(self.req_pool.req_to_token, t)
        return ForwardBatch(
            mode=mode, batch_size=n,
            input_ids=token_ids.reshape(-1).to(self.device, torch.long) if isinstance(token_ids, torch.Tensor) else inputs.input_ids[:t],
            positions=inputs.positions[:t], req_pool_indices=inputs.req_pool_indices[:n],
            seq_lens=inputs.seq_lens[:n], extend_seq_lens=inputs.extend_seq_lens[:n],
            extend_start_loc=inputs.extend_start_loc[:n], out_cache_loc=inputs.out_cache_loc[:t],
            seq_lens_cpu=staged.seq_lens_cpu, extend_seq_lens_cpu=staged.extend_seq_lens_cpu,
            logits_indices=logits if isinstance(logits, torch.Tensor) else inputs.logits_indices[: staged.logit_rows],
            stride=stride, capture_hidden=capture_hidden, feature=feature, feature_kind=feature_kind,
        )

    def _pick_graph(self, shape: BatchShape) -> PhaseGraphRunner | None:
        """The graph that replays a batch of ``shape``, or None (counted with the reason)."""
        if shape.mode == ForwardMode.EXTEND:
            candidates = list(self._prefill_graphs)
        elif self._selected is None or shape.mode in self._selected:
            candidates = self._graphs.get(shape.mode, [])
        else:
            candidates = []
        reasons = []
        fits = []
        for g in candidates:
            ok, reason = g.can_run(shape)
            if ok:
                fits.append(g)
            else:
                reasons.append(reason)
        if fits:
            self.path_counts[f"{shape.mode.name} graph"] += 1
            # prefill graphs differ in token rows: the fewest padded rows (every GEMM's M) wins
            return min(fits, key=lambda g: g.phase.capacity(g.bucket(shape.bs)))
        if len(reasons) > 1 and shape.mode != ForwardMode.EXTEND and all(r.startswith("width ") for r in reasons):
            reasons = [f"width {shape.stride} not among the captured widths {[g.phase.width for g in candidates]}"]
        if reasons:
            self.path_counts[f"{shape.mode.name} eager: {reasons[-1]}"] += 1
        return None

    def _eager_inputs(self, mode: ForwardMode, tokens: int, bs: int, logit_rows: int, feature_dim: int) -> PhaseInputs:
        """This mode's inputs, grown (a new allocation; graphs keep the inputs they captured
        with) when a batch does not fit."""
        cur = self._inputs.get(mode)
        if cur is not None and cur.fits(tokens, bs, logit_rows, feature_dim):
            return cur
        grow = (lambda a, b: max(a, 2 * b)) if cur is not None else (lambda a, b: max(a, 16))
        t = grow(tokens, cur.max_tokens if cur else 0)
        new = PhaseInputs.alloc(t, grow(bs, cur.max_bs if cur else 0), max(t, grow(logit_rows, 0)), feature_dim, self.device, self.dtype)
        self._inputs[mode] = new
        return new

    # ---- graphs --------------------------------------------------------------------------
    def graph_pool(self, emulate: bool) -> Any:
        """This model's graph memory pool (every graph of one model shares it; target and draft
        never share one: a draft graph overwriting the target's pool gave illegal addresses in
        production)."""
        if not self._pool_made:
            self._pool, self._pool_made = new_pool(emulate), True
        return self._pool

    def capture(self, phase: PhaseSpec, sizes: list[int], *, emulate: bool) -> CaptureStats:
        """Capture ``phase`` for batch sizes ``sizes``; ``forward`` replays it from then on."""
        mx = max(sizes)
        t = phase.capacity(mx)
        inputs = self._eager_inputs(phase.mode, t, mx, mx * phase.rows_per_request, phase.feature_dim if phase.feature else 0)
        g = PhaseGraphRunner(self.model, self.backend, phase, sizes, emulate=emulate, pool=self.graph_pool(emulate), inputs=inputs)
        stats = g.capture()
        if phase.mode == ForwardMode.EXTEND:
            self._prefill_graphs = sorted([*self._prefill_graphs, g], key=lambda r: (r.phase.tokens, r.phase.width))
        else:
            key = (phase.width, phase.draft_step)  # a multi-layer draft has one DRAFT_DECODE graph per step
            others = [o for o in self._graphs.get(phase.mode, []) if (o.phase.width, o.phase.draft_step) != key]
            self._graphs[phase.mode] = sorted([*others, g], key=lambda r: (r.phase.width, r.phase.draft_step))
        return stats

    def graph(self, mode: ForwardMode) -> PhaseGraphRunner | None:
        """The captured graph runner of a fixed-width phase, its widest one where several widths
        were captured (None if not captured)."""
        runners = self._graphs.get(mode)
        return runners[-1] if runners else None

    def graph_widths(self, mode: ForwardMode) -> list[int]:
        """The widths a fixed-width phase was captured at, narrowest first."""
        return sorted({g.phase.width for g in self._graphs.get(mode, [])})

    @property
    def prefill_graphs(self) -> list[PhaseGraphRunner]:
        return list(self._prefill_graphs)

    def select_graphs(self, modes: Collection[ForwardMode] | None) -> None:
        """Let only the captured graphs of ``modes`` replay (None: all of them); the others run
        eagerly (prefill graphs are not affected). The kit uses it to test one graph at a time
        inside a running engine."""
        self._selected = None if modes is None else frozenset(modes)

    # ---- execution ---------------------------------------------------------------------
    def forward(self, batch: ForwardBatch) -> ModelOutput:
        """Run a batch: replay the graph ``make_batch`` staged it for, else eagerly (the backend
        builds metadata for this batch, then the model runs). ``ModelOutput.graph`` says which
        path ran; graph outputs are views into static buffers."""
        if batch.stage_serial is not None:
            serial, graph = self._staged.get(batch.mode, (None, None))
            if serial != batch.stage_serial:
                raise RuntimeError(f"{batch.mode.name} batch was overwritten: another batch of this mode was staged after it")
            if graph is not None:
                return graph.replay(batch)
        batch.attn_backend = self.backend
        self.backend.init_forward_metadata(batch)
        return self.model(batch)

    def graph_hit_rate(self, other_replays: int = 0) -> float:
        """Share of forwards that replayed a graph; ``other_replays`` are graph replays made
        outside this runner (fused iterations) counted as forwards too."""
        graph = sum(c for k, c in self.path_counts.items() if k.endswith(" graph")) + other_replays
        total = sum(self.path_counts.values()) + other_replays
        return graph / total if total else 0.0

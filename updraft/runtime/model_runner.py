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
from updraft.batch import CaptureHidden, ForwardBatch, ForwardMode, make_forward_batch
from updraft.memory.pools import KVPool, ReqToTokenPool
from updraft.models.llama import ModelOutput
from updraft.runtime.graphs.device_graph import new_pool
from updraft.runtime.graphs.phase_graph import CaptureStats, PhaseGraphRunner, PhaseSpec


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
        self.req_pool = req_pool
        self.kv_pool = KVPool(cfg.num_layers, num_pages, page_size, cfg.num_kv_heads, cfg.head_dim, self.dtype, self.device)
        self.backend: AttentionBackend = create_backend(
            backend_name, self.kv_pool, req_pool.req_to_token, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        )
        self.backend_name = backend_name
        self._graphs: dict[ForwardMode, PhaseGraphRunner] = {}
        #: EXTEND (prefill) runners, narrowest token width first: a short prompt replays the
        #: narrowest graph it fits instead of paying ~1000 eager launches (host-bound).
        self._prefill_graphs: list[PhaseGraphRunner] = []
        self._pool: Any = None  # one graph memory pool per model, created at the first capture
        self._pool_made = False
        #: phases whose captured graph may replay (None: all); see ``select_graphs``
        self._selected: frozenset[ForwardMode] | None = None
        #: "MODE graph" / "MODE eager: <reason>" -> count, for logs and benchmarks.
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
        logits: str = "last",
        stride: int = 0,
        capture_hidden: CaptureHidden = CaptureHidden.NONE,
    ) -> ForwardBatch:
        """A ForwardBatch on this runner's device from host-side lists (eager path)."""
        if isinstance(token_ids, torch.Tensor):
            input_ids = token_ids.to(self.device, torch.long)
        else:
            input_ids = torch.tensor(token_ids, dtype=torch.long).to(self.device, non_blocking=True)
        batch = make_forward_batch(
            mode,
            input_ids,
            torch.tensor(rows, dtype=torch.long).to(self.device, non_blocking=True),
            torch.tensor(seq_lens, dtype=torch.int32),
            torch.tensor(extend_lens, dtype=torch.int32),
            self.req_pool.req_to_token,
            logits=logits,
            stride=stride,
            capture_hidden=capture_hidden,
        )
        return batch

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
        g = PhaseGraphRunner(self.model, self.backend, phase, sizes, emulate=emulate, pool=self.graph_pool(emulate))
        stats = g.capture()
        if phase.mode == ForwardMode.EXTEND:
            self._prefill_graphs = sorted([*self._prefill_graphs, g], key=lambda r: r.phase.width)
        else:
            self._graphs[phase.mode] = g
        return stats

    def graph(self, mode: ForwardMode) -> PhaseGraphRunner | None:
        """The captured graph runner of a fixed-width phase (None if not captured)."""
        return self._graphs.get(mode)

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
        """Replay the captured graph of this mode when ``can_run`` allows, else run eagerly (the
        backend builds metadata for this batch, then the model runs). ``ModelOutput.graph``
        says which path ran; graph outputs are views into static buffers."""
        candidates = self._prefill_graphs if batch.mode == ForwardMode.EXTEND else [self._graphs.get(batch.mode)]
        reason = ""
        if self._selected is not None and batch.mode != ForwardMode.EXTEND and batch.mode not in self._selected:
            candidates = []
        for graph in candidates:
            if graph is None:
                continue
            ok, reason = graph.can_run(batch)
            if ok:
                self.path_counts[f"{batch.mode.name} graph"] += 1
                return graph.replay(batch)
        if reason:
            self.path_counts[f"{batch.mode.name} eager: {reason}"] += 1
        batch.attn_backend = self.backend
        self.backend.init_forward_metadata(batch)
        return self.model(batch)

    def graph_hit_rate(self, other_replays: int = 0) -> float:
        """Share of forwards that replayed a graph; ``other_replays`` are graph replays made
        outside this runner (fused iterations) counted as forwards too."""
        graph = sum(c for k, c in self.path_counts.items() if k.endswith(" graph")) + other_replays
        total = sum(self.path_counts.values()) + other_replays
        return graph / total if total else 0.0

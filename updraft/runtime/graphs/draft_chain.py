"""The S-1 draft forwards of one speculative iteration in ONE graph (greedy drafts).

Step k (k = 1..S-1) of request i reads draft ``d_k`` at KV length ``base_i + k`` (EAGLE also reads
the previous step's feature) and its argmax becomes ``d_{k+1}``. A multi-layer (MTP) draft says
where each step runs (``updraft.models.mtp.chain_step``: KV length ``base_i + offset``, and the
step's ``draft_step``, which picks its layer and is baked into the captured step). Inside the graph the argmax,
the draft->target id map (EAGLE-3, an EAGLE-1 token map) and the feature are written straight into the next step's
static inputs, so one replay runs the whole chain without host round trips. Before replay the
runner fills every step's inputs that depend on the batch (positions, KV slots, lengths) and
runs the backend's replay-init once per step (each step owns its captured metadata).

Sampling drafts (temperature > 0) need per-request generators and the draft distributions: those
batches take the per-step path (``can_run`` says so).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from updraft.batch import CaptureHidden, FeatureKind, ForwardBatch, ForwardMode
from updraft.models.eagle import draft_to_target
from updraft.models.mtp import chain_step
from updraft.runtime.graphs.device_graph import CudaGraph, EmulatedGraph, make_graph
from updraft.runtime.graphs.phase_graph import CaptureStats, PhaseSpec, phase_inputs, static_batch

#: ``(logits, pre-norm feature, request rows, dst) -> dst``: greedy draft target ids written into dst
ChainPick = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class DraftChainGraph:
    """Captures ``steps`` chained DRAFT_DECODE forwards of a draft model for several batch sizes."""

    def __init__(self, model: torch.nn.Module, backend: Any, req_to_token: torch.Tensor, steps: int, sizes: list[int],
                 *, hidden_dim: int, emulate: bool, pool: Any, pick: ChainPick | None = None) -> None:
        self.model = model
        self.backend = backend
        self.req_to_token = req_to_token
        self.steps = steps
        self.sizes = sorted(sizes, reverse=True)
        self.emulate = emulate
        self.pool = pool
        w = next(model.parameters())
        self.device, self.dtype = w.device, w.dtype
        self.hidden_dim = hidden_dim
        feature = FeatureKind.DRAFT if hidden_dim else FeatureKind.NONE
        self.phase = PhaseSpec(ForwardMode.DRAFT_DECODE, 1, "last", CaptureHidden.LAST, feature, hidden_dim)
        self.inputs = [phase_inputs(self.phase, self.sizes[0], self.device, self.dtype) for _ in range(steps)]
        self.tokens = torch.zeros(self.sizes[0], steps, dtype=torch.long, device=self.device)  # d_2..d_{S}
        #: chain step k + 1 of the draft (KV offset, draft_step) for each captured step k
        self.plan = [chain_step(model, k + 1) for k in range(steps)]
        self.batches: dict[int, list[ForwardBatch]] = {}
        self.graphs: dict[int, EmulatedGraph | CudaGraph] = {}
        self.stats: CaptureStats | None = None
        self.to_target = draft_to_target(model)
        #: the greedy pick in place of the argmax and the id map (logits, pre-norm feature, request rows, dst)
        self.pick = pick

    def _step_batch(self, k: int, bs: int) -> ForwardBatch:
        phase = dataclasses.replace(self.phase, draft_step=self.plan[k].key)
        return static_batch(phase, self.inputs[k], bs, self.backend, self.device)

    def _body(self, bs: int) -> torch.Tensor:
        batches = self.batches[bs]
        for k, b in enumerate(batches):
            out = self.model(b)
            if self.pick is not None and out.hidden is not None:
                tok = self.pick(out.logits, out.hidden, b.req_pool_indices, self.tokens[:bs, k])
            else:
                tok = out.logits.argmax(-1)
                if self.to_target is not None:
                    tok = self.to_target(tok)
                self.tokens[:bs, k].copy_(tok)
            if k + 1 < len(batches):
                nxt = batches[k + 1]
                nxt.input_ids.copy_(tok)
                if nxt.feature is not None and out.hidden is not None:
                    nxt.feature.copy_(out.hidden)
        return self.tokens[:bs]

    def capture(self) -> CaptureStats:
        t0 = time.perf_counter()
        mem0 = torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else 0
        for bs in self.sizes:
            batches = [self._step_batch(k, bs) for k in range(self.steps)]
            for b in batches:
                self.backend.init_capture_metadata(b)
            self.batches[bs] = batches
            for _ in range(2):
                self._body(bs)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            g = make_graph(self.emulate, self.pool)
            g.capture(lambda bs=bs: self._body(bs), watch=lambda bs=bs: self.batches[bs])
            self.graphs[bs] = g
        mem = (torch.cuda.memory_allocated(self.device) - mem0) if self.device.type == "cuda" else 0
        self.stats = CaptureStats(list(self.sizes), time.perf_counter() - t0, mem)
        return self.stats

    def can_run(self, bsz: int, greedy: bool, num_steps: int) -> tuple[bool, str]:
        if not self.graphs:
            return False, "not captured"
        if not greedy:
            return False, "sampling drafts run step by step"
        if num_steps - 1 != self.steps:
            return False, f"{num_steps - 1} draft steps != captured {self.steps}"
        if bsz > self.sizes[0]:
            return False, f"batch size {bsz} > largest captured {self.sizes[0]}"
        return True, ""

    def replay(self, first: torch.Tensor, hidden: torch.Tensor | None, rows: list[int], base: list[int]) -> torch.Tensor:
        """``first`` [n] = d_1, ``hidden`` [n, H] its feature, ``rows`` the n request rows,
        ``base`` the KV length before step 1. Returns [n, steps] = d_2..d_S (a view: valid
        until the next replay). Each step's rows are staged by the one builder
        (``PhaseInputs.write``); its tokens and feature come from the step before, in the graph."""
        n = first.shape[0]
        bs = min(s for s in self.sizes if s >= n)
        for k, captured in enumerate(self.batches[bs]):
            st = self.inputs[k]
            staged = st.write(None, rows, [b + self.plan[k].offset for b in base], [1] * n, "last", pad_to=bs, width=1,
                              fill=self.backend.fill_seq_len)
            st.gather_slots(self.req_to_token, bs)
            if k == 0:
                st.input_ids[:n].copy_(first)
                if st.feature is not None and hidden is not None:
                    st.feature[:n].copy_(hidden)
                    st.feature[n:bs].zero_()
            view = dataclasses.replace(captured, seq_lens_cpu=staged.seq_lens_cpu, extend_seq_lens_cpu=staged.extend_seq_lens_cpu,
                                       real_batch_size=n, num_real_tokens=n, replay_bs=bs)
            self.backend.init_replay_metadata(view)
        self.graphs[bs].replay()
        return self.tokens[:n]

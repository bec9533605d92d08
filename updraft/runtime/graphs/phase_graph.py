"""Graph runners: one per phase (forward mode) of one model, capturing several batch sizes.

Contract (../shared/design/spec-decoding.md):

* Static inputs live in a typed dataclass sized for the largest captured batch (x tokens per
  request). A captured batch of size ``bs`` is a set of views into them.
* Capture: largest batch size first, after warm-up forwards, metadata seeded with real-looking
  values (padding-row lengths, never zeros: failure class 8), all graphs of one model sharing
  one memory pool.
* Replay: the smallest captured ``bs >= real bs``; real rows copied in; padded rows filled as
  production does (``seq_lens`` = the backend's fill value, ``req_pool_indices`` = 0,
  ``out_cache_loc`` = the scratch slot 0, ``extend_seq_lens`` = the captured width); then the
  backend's replay-init fills the captured metadata IN PLACE (same builder as eager and capture);
  then replay; outputs are sliced to the real rows. They are views into the runner's output
  buffers, valid until the next replay of the same runner (any batch size; clone what must live
  longer). Those buffers are allocated OUTSIDE the graph memory pool and written by a copy at the
  end of each graph: graphs of one model share a pool, so a tensor a graph returns from the pool
  can sit where another graph, captured earlier, keeps its temporaries, and a replay of that
  other graph would overwrite it (failure class 7; found on an H100 by the kit's cross-replay
  check: a DRAFT_DECODE replay clobbered the DRAFT_EXTEND_V2 logits).
* ``can_run`` says why a batch cannot replay (the caller runs it eagerly instead).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import torch

from updraft.batch import CaptureHidden, FeatureKind, ForwardBatch, ForwardMode, LogitRows
from updraft.models.llama import ModelOutput
from updraft.runtime.graphs.device_graph import CudaGraph, EmulatedGraph, make_graph

DEFAULT_CAPTURE_BS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)


def capture_sizes(max_bs: int, pool_rows: int, explicit: list[int] | tuple[int, ...] | None = None) -> list[int]:
    """Batch sizes to capture, largest first: the default ladder (then steps of 16, 32) up to
    ``max_bs``, capped by the request pool."""
    cap = min(max_bs, pool_rows)
    if explicit:
        sizes = sorted({b for b in explicit if 1 <= b <= cap}, reverse=True)
        return sizes
    ladder = list(DEFAULT_CAPTURE_BS)
    b = 64
    while b < cap:
        b += 16 if b < 128 else 32
        ladder.append(b)
    sizes = [s for s in ladder if s <= cap]
    if cap not in sizes:
        sizes.append(cap)
    return sorted(set(sizes), reverse=True)


@dataclass(frozen=True)
class PhaseSpec:
    """What one graph runner captures."""

    mode: ForwardMode
    width: int  # tokens per request (1 decode, ndt verify / v2, S+1 for v1 packed capacity)
    logits: LogitRows  # "last" (one row per request), "all" (every row), "select" (one chosen row), "none"
    capture_hidden: CaptureHidden = CaptureHidden.NONE
    feature: FeatureKind = FeatureKind.NONE  # the per-token input the model reads besides tokens
    feature_dim: int = 0

    @property
    def rows_per_request(self) -> int:
        return {"all": self.width, "none": 0}.get(self.logits, 1)

    @property
    def packed(self) -> bool:
        """DRAFT_EXTEND (v1): variable tokens per request packed in a width-per-request buffer."""
        return not self.mode.is_fixed_stride(include_v2=True)


@dataclass
class StaticInputs:
    """Every tensor a captured forward reads, at their largest size."""

    input_ids: torch.Tensor  # [max_bs * width] int64
    positions: torch.Tensor  # [max_bs * width] int64
    out_cache_loc: torch.Tensor  # [max_bs * width] int64
    req_pool_indices: torch.Tensor  # [max_bs] int64
    seq_lens: torch.Tensor  # [max_bs] int32
    extend_seq_lens: torch.Tensor  # [max_bs] int32
    extend_start_loc: torch.Tensor  # [max_bs] int32
    logits_indices: torch.Tensor  # [max_bs * rows_per_request] int64
    feature: torch.Tensor | None  # [max_bs * width, feature_dim]

    @classmethod
    def alloc(cls, phase: PhaseSpec, max_bs: int, device: torch.device, dtype: torch.dtype) -> StaticInputs:
        t = max_bs * phase.width

        def z(n: int, dt: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.zeros(n, dtype=dt, device=device)

        return cls(
            input_ids=z(t),
            positions=z(t),
            out_cache_loc=z(t),
            req_pool_indices=z(max_bs),
            seq_lens=z(max_bs, torch.int32),
            extend_seq_lens=z(max_bs, torch.int32),
            extend_start_loc=z(max_bs, torch.int32),
            logits_indices=z(max_bs * phase.rows_per_request),
            feature=torch.zeros(t, phase.feature_dim, dtype=dtype, device=device) if phase.feature else None,
        )


def static_batch(phase: PhaseSpec, st: StaticInputs, bs: int, backend: Any, device: torch.device) -> ForwardBatch:
    """The captured batch of ``bs`` requests: views into ``st``, seeded like padded rows (prefix
    0, ``width`` new tokens in the padding row 0, every KV write to the scratch slot; never zero
    lengths: failure class 8). Logits rows: every token ("all"), none ("none"), else the last
    row of each request (a "select" replay overwrites them with the chosen rows)."""
    w = phase.width
    t = bs * w
    fill = max(backend.fill_seq_len, w)
    st.seq_lens[:bs].fill_(fill)
    st.extend_seq_lens[:bs].fill_(w)
    st.extend_start_loc[:bs].copy_(torch.arange(bs, device=device, dtype=torch.int32) * w)
    rows = bs * phase.rows_per_request
    if phase.logits == "all":
        st.logits_indices[:rows].copy_(torch.arange(t, device=device))
    elif rows:
        st.logits_indices[:rows].copy_(torch.arange(bs, device=device) * w + w - 1)
    batch = ForwardBatch(
        mode=phase.mode,
        batch_size=bs,
        input_ids=st.input_ids[:t],
        positions=st.positions[:t],
        req_pool_indices=st.req_pool_indices[:bs],
        seq_lens=st.seq_lens[:bs],
        extend_seq_lens=st.extend_seq_lens[:bs],
        extend_start_loc=st.extend_start_loc[:bs],
        out_cache_loc=st.out_cache_loc[:t],
        seq_lens_cpu=torch.full((bs,), fill, dtype=torch.int32),
        extend_seq_lens_cpu=torch.full((bs,), w, dtype=torch.int32),
        logits_indices=st.logits_indices[:rows],
        stride=0 if phase.packed else w,
        max_extend_len=w,
        capture_hidden=phase.capture_hidden,
        attn_backend=backend,
    )
    if phase.feature and st.feature is not None:
        batch.set_feature(phase.feature, st.feature[:t])
    return batch


@dataclass
class CaptureStats:
    sizes: list[int]
    seconds: float
    memory_bytes: int


class PhaseGraphRunner:
    """Captures ``phase`` of ``model`` (through ``backend``) for ``sizes`` batch sizes."""

    def __init__(self, model: torch.nn.Module, backend: Any, phase: PhaseSpec, sizes: list[int], *, emulate: bool, pool: Any) -> None:
        self.model = model
        self.backend = backend
        self.phase = phase
        self.sizes = sorted(sizes, reverse=True)
        self.emulate = emulate
        self.pool = pool
        w = next(model.parameters())
        self.device, self.dtype = w.device, w.dtype
        self.static = StaticInputs.alloc(phase, self.sizes[0], self.device, self.dtype)
        self.batches: dict[int, ForwardBatch] = {}
        self.graphs: dict[int, EmulatedGraph | CudaGraph] = {}
        self.stats: CaptureStats | None = None
        self.replays = 0
        self.out: ModelOutput | None = None  # allocated at the first (largest) capture

    # ---- capture -----------------------------------------------------------------------
    def _static_batch(self, bs: int) -> ForwardBatch:
        return static_batch(self.phase, self.static, bs, self.backend, self.device)

    def capture(self) -> CaptureStats:
        t0 = time.perf_counter()
        mem0 = torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else 0
        for bs in self.sizes:
            batch = self._static_batch(bs)
            self.backend.init_capture_metadata(batch)
            for _ in range(2):  # warm-up: lazy init, autotuning, allocator
                warm = self.model(batch)
            if self.out is None:  # largest bs first: these shapes bound every later capture
                self.out = _empty_like_output(warm)
            del warm
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            graph = make_graph(self.emulate, self.pool)
            graph.capture(lambda b=batch: self._forward_into_out(b), watch=lambda b=batch: b)
            self.batches[bs] = batch
            self.graphs[bs] = graph
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        mem = (torch.cuda.memory_allocated(self.device) - mem0) if self.device.type == "cuda" else 0
        self.stats = CaptureStats(list(self.sizes), time.perf_counter() - t0, mem)
        return self.stats

    def _forward_into_out(self, batch: ForwardBatch) -> ModelOutput:
        """The captured callable: forward, then copy every output into the runner's buffers."""
        out = self.model(batch)
        assert self.out is not None

        def into(dst: torch.Tensor | None, src: torch.Tensor | None) -> torch.Tensor | None:
            if src is None:
                return None
            assert dst is not None and src.shape[1:] == dst.shape[1:] and src.shape[0] <= dst.shape[0]
            view = dst[: src.shape[0]]
            view.copy_(src)
            return view

        return ModelOutput(
            logits=into(self.out.logits, out.logits),  # type: ignore[arg-type]
            hidden=into(self.out.hidden, out.hidden),
            aux_hidden=into(self.out.aux_hidden, out.aux_hidden),
        )

    # ---- replay ------------------------------------------------------------------------
    def can_run(self, batch: ForwardBatch) -> tuple[bool, str]:
        p = self.phase
        if batch.mode != p.mode:
            return False, f"{batch.mode.name} is not the captured mode {p.mode.name}"
        if not self.graphs:
            return False, "not captured"
        if batch.batch_size > self.sizes[0]:
            return False, f"batch size {batch.batch_size} > largest captured {self.sizes[0]}"
        if batch.custom_mask is not None:
            return False, "tree masks are not captured"
        if p.packed:
            if int(batch.extend_seq_lens_cpu.max()) > p.width:
                return False, f"extend length {int(batch.extend_seq_lens_cpu.max())} > captured width {p.width}"
        elif batch.stride != p.width:
            return False, f"width {batch.stride} != captured width {p.width}"
        if batch.capture_hidden != p.capture_hidden:
            return False, f"capture_hidden {batch.capture_hidden.name} != captured {p.capture_hidden.name}"
        if p.feature != batch.feature_kind:
            return False, f"feature {batch.feature_kind.name} != captured {p.feature.name}"
        if p.logits != "all" and batch.logits_indices.numel() != batch.batch_size:
            return False, "needs one logits row per request"
        if p.logits == "all" and batch.logits_indices.numel() != batch.num_tokens:
            return False, "needs a logits row per token"
        return True, ""

    def replay(self, batch: ForwardBatch) -> ModelOutput:
        ok, reason = self.can_run(batch)
        if not ok:
            raise ValueError(f"cannot replay {self.phase.mode.name}: {reason}")
        n = batch.batch_size
        bs = min(s for s in self.sizes if s >= n)
        static_batch = self.graphs_batch(bs)
        view = self._fill(batch, bs, static_batch)
        self.backend.init_replay_metadata(view)
        self.graphs[bs].replay()
        self.replays += 1
        return self._slice(self.graphs[bs].output, batch)

    def graphs_batch(self, bs: int) -> ForwardBatch:
        return self.batches[bs]

    def _fill(self, batch: ForwardBatch, bs: int, static_batch: ForwardBatch) -> ForwardBatch:
        """Copy real rows in, fill padded rows as production does; return the replay view."""
        p, st, w = self.phase, self.static, self.phase.width
        n, t_real = batch.batch_size, batch.num_tokens
        t = bs * w
        fill = self.backend.fill_seq_len
        st.input_ids[:t_real].copy_(batch.input_ids)
        st.positions[:t_real].copy_(batch.positions)
        st.out_cache_loc[:t_real].copy_(batch.out_cache_loc)
        st.input_ids[t_real:t].zero_()
        st.positions[t_real:t].zero_()
        st.out_cache_loc[t_real:t].zero_()  # padded tokens write the scratch slot
        st.req_pool_indices[:n].copy_(batch.req_pool_indices)
        st.req_pool_indices[n:bs].zero_()
        st.seq_lens[:n].copy_(batch.seq_lens)
        st.seq_lens[n:bs].fill_(fill)
        st.extend_seq_lens[:n].copy_(batch.extend_seq_lens)
        st.extend_seq_lens[n:bs].fill_(w)
        # Padded requests own `width` rows each after the real tokens (fixed stride: i * width).
        st.extend_start_loc[:n].copy_(batch.extend_start_loc)
        st.extend_start_loc[n:bs].copy_(t_real + torch.arange(bs - n, device=self.device, dtype=torch.int32) * w)
        rows = p.rows_per_request
        r_real = batch.logits_indices.numel()
        st.logits_indices[:r_real].copy_(batch.logits_indices)
        if p.logits == "all":
            st.logits_indices[r_real : bs * rows].copy_(torch.arange(t_real, t, device=self.device))
        else:
            st.logits_indices[n:bs].copy_(t_real + torch.arange(bs - n, device=self.device) * w + w - 1)
        if st.feature is not None and batch.feature is not None:
            st.feature[:t_real].copy_(batch.feature)
            st.feature[t_real:t].zero_()
        seq_cpu = torch.cat([batch.seq_lens_cpu.to(torch.int32), torch.full((bs - n,), fill, dtype=torch.int32)])
        ext_cpu = torch.cat([batch.extend_seq_lens_cpu.to(torch.int32), torch.full((bs - n,), w, dtype=torch.int32)])
        # The view shares every device tensor and the metadata object with the captured batch;
        # only the host copies (used for checks, never as kernel arguments) are per replay.
        return dataclasses.replace(static_batch, seq_lens_cpu=seq_cpu, extend_seq_lens_cpu=ext_cpu, real_batch_size=n, num_real_tokens=t_real)

    def _slice(self, out: ModelOutput, batch: ForwardBatch) -> ModelOutput:
        r = batch.logits_indices.numel()
        t = batch.num_tokens
        hidden = aux = None
        if out.hidden is not None:
            hidden = out.hidden[:t] if self.phase.capture_hidden == CaptureHidden.FULL else out.hidden[:r]
        if out.aux_hidden is not None:
            aux = out.aux_hidden[:t] if self.phase.capture_hidden == CaptureHidden.FULL else out.aux_hidden[:r]
        return ModelOutput(logits=out.logits[:r], hidden=hidden, aux_hidden=aux, graph=True)


def _empty_like_output(out: ModelOutput) -> ModelOutput:
    """Output buffers shaped like ``out`` (plain allocations: outside any graph pool)."""

    def like(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else torch.empty_like(t)

    return ModelOutput(logits=like(out.logits), hidden=like(out.hidden), aux_hidden=like(out.aux_hidden))  # type: ignore[arg-type]

"""Graph runners: one per phase (forward mode) of one model, capturing several batch sizes.

Contract (../shared/design/spec-decoding.md):

* Static inputs are the model runner's ``PhaseInputs`` of the phase (``updraft.runtime.phase_inputs``),
  shared with its eager forwards and sized at least for the largest captured batch (x tokens per
  request). A captured batch of size ``bs`` is a set of views into them.
* Capture: largest batch size first, after warm-up forwards, metadata seeded with real-looking
  values (padding-row lengths, never zeros: failure class 8), all graphs of one model sharing
  one memory pool.
* Replay: the smallest captured ``bs >= real bs``; the runner's one builder (``PhaseInputs.write``)
  has written the real rows and the padded ones as production does (``seq_lens`` = the backend's
  fill value, ``req_pool_indices`` = 0, ``out_cache_loc`` = the scratch slot 0, ``extend_seq_lens``
  = the captured width) straight into the static inputs; then the
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
from updraft.runtime.phase_inputs import PhaseInputs

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
    #: Packed phases: the token rows of a captured batch, whatever their split among requests
    #: (each at most ``width``), padded requests taking one row each: a many-request prefill
    #: graph. 0: ``width`` rows per request, padded requests taking ``width`` each.
    tokens: int = 0
    draft_step: int = 0  # a multi-layer draft's chain step (``ForwardBatch.draft_step``), baked in

    @property
    def rows_per_request(self) -> int:
        return {"all": self.width, "none": 0}.get(self.logits, 1)

    def capacity(self, bs: int) -> int:
        """Token rows a captured batch of ``bs`` requests runs over (every GEMM's M)."""
        return min(self.tokens, bs * self.width) if self.tokens else bs * self.width

    @property
    def pad_tokens(self) -> int:
        """Token rows of one padded request."""
        return 1 if self.tokens else self.width

    @property
    def packed(self) -> bool:
        """DRAFT_EXTEND (v1): variable tokens per request packed in a width-per-request buffer."""
        return not self.mode.is_fixed_stride(include_v2=True)


@dataclass(frozen=True)
class BatchShape:
    """What decides whether a batch can replay a phase graph, known on the host before any
    tensor is written."""

    mode: ForwardMode
    bs: int
    max_extend: int  # longest request (tokens)
    stride: int  # fixed-stride modes: tokens per request; 0 packed
    capture_hidden: CaptureHidden
    feature: FeatureKind
    logits: LogitRows
    tree_mask: bool = False
    tokens: int = 0  # token rows in all (the sum of the requests' extend lengths)
    draft_step: int = 0

    @classmethod
    def of(cls, batch: ForwardBatch) -> BatchShape:
        rows = batch.logits_indices.numel()
        logits: LogitRows = "all" if rows == batch.num_tokens else ("none" if rows == 0 else "last")
        ext = int(batch.extend_seq_lens_cpu.max()) if batch.batch_size else 0
        return cls(batch.mode, batch.batch_size, ext, batch.stride, batch.capture_hidden, batch.feature_kind, logits,
                   batch.custom_mask is not None, int(batch.extend_seq_lens_cpu.sum()), batch.draft_step)


def phase_inputs(phase: PhaseSpec, max_bs: int, device: torch.device, dtype: torch.dtype) -> PhaseInputs:
    """Inputs sized for ``max_bs`` requests of ``phase``."""
    t = phase.capacity(max_bs)
    return PhaseInputs.alloc(t, max_bs, max_bs * phase.rows_per_request, phase.feature_dim if phase.feature else 0, device, dtype)


def static_batch(phase: PhaseSpec, st: PhaseInputs, bs: int, backend: Any, device: torch.device) -> ForwardBatch:
    """The captured batch of ``bs`` requests: views into ``st``, seeded like padded rows (prefix
    0, new tokens in the padding row 0, every KV write to the scratch slot; never zero lengths:
    failure class 8). Each request holds ``width`` tokens, or its share of the ``tokens`` of a
    many-request prefill graph (shares differ by at most one). Logits rows: every token ("all"),
    none ("none"), else the last row of each request (a "select" replay overwrites them with the
    chosen rows)."""
    w = phase.width
    t = phase.capacity(bs)
    ext = torch.full((bs,), t // bs, dtype=torch.int32)
    ext[: t % bs] += 1
    start = torch.cumsum(ext, 0, dtype=torch.int32) - ext
    seq = ext.clamp(min=backend.fill_seq_len)
    st.seq_lens[:bs].copy_(seq)
    st.extend_seq_lens[:bs].copy_(ext)
    st.extend_start_loc[:bs].copy_(start)
    rows = bs * phase.rows_per_request
    if phase.logits == "all":
        st.logits_indices[:rows].copy_(torch.arange(t, device=device))
    elif rows:
        st.logits_indices[:rows].copy_((start + ext - 1).long())
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
        seq_lens_cpu=seq,
        extend_seq_lens_cpu=ext,
        logits_indices=st.logits_indices[:rows],
        stride=0 if phase.packed else w,
        max_extend_len=w,
        capture_hidden=phase.capture_hidden,
        attn_backend=backend,
        draft_step=phase.draft_step,
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

    def __init__(self, model: torch.nn.Module, backend: Any, phase: PhaseSpec, sizes: list[int], *, emulate: bool, pool: Any,
                 inputs: PhaseInputs | None = None) -> None:
        self.model = model
        self.backend = backend
        self.phase = phase
        self.sizes = sorted(sizes, reverse=True)
        self.emulate = emulate
        self.pool = pool
        w = next(model.parameters())
        self.device, self.dtype = w.device, w.dtype
        #: the phase's inputs (the model runner's, shared with its eager forwards; or our own)
        self.static = inputs if inputs is not None else phase_inputs(phase, self.sizes[0], self.device, self.dtype)
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
    def can_run(self, shape: BatchShape) -> tuple[bool, str]:
        p = self.phase
        if shape.mode != p.mode:
            return False, f"{shape.mode.name} is not the captured mode {p.mode.name}"
        if not self.graphs:
            return False, "not captured"
        if shape.bs > self.sizes[0]:
            return False, f"batch size {shape.bs} > largest captured {self.sizes[0]}"
        if shape.tree_mask:
            return False, "tree masks are not captured"
        if p.packed:
            if shape.max_extend > p.width:
                return False, f"extend length {shape.max_extend} > captured width {p.width}"
            b = self.bucket(shape.bs)
            if shape.tokens + (b - shape.bs) * p.pad_tokens > p.capacity(b):
                return False, f"{shape.tokens} tokens of {shape.bs} requests > captured {p.capacity(b)} at batch size {b}"
        elif shape.stride != p.width:
            return False, f"width {shape.stride} != captured width {p.width}"
        if shape.capture_hidden != p.capture_hidden:
            return False, f"capture_hidden {shape.capture_hidden.name} != captured {p.capture_hidden.name}"
        if p.feature != shape.feature:
            return False, f"feature {shape.feature.name} != captured {p.feature.name}"
        if p.draft_step != shape.draft_step:
            return False, f"draft step {shape.draft_step} != captured {p.draft_step}"
        one_row = p.width == 1  # one token per request: "all" rows are the "last" rows
        if ((p.logits == "all") != (shape.logits == "all") and not one_row) or (p.logits == "none") != (shape.logits == "none"):
            return False, f"logits rows {shape.logits!r} != captured {p.logits!r}"
        return True, ""

    def bucket(self, n: int) -> int:
        """The captured batch size a batch of ``n`` requests replays at."""
        return min(s for s in self.sizes if s >= n)

    def stage(self, token_ids: list[int] | torch.Tensor, rows: list[int], seq_lens: list[int], extend_lens: list[int],
              req_to_token: torch.Tensor, *, select: torch.Tensor | None = None, feature: torch.Tensor | None = None) -> ForwardBatch:
        """Write a batch of ``len(rows)`` requests into the static inputs (the one builder,
        padded to the captured size it replays at) and return the replay view. Device-resident
        inputs are copied in: token ids, the chosen logits rows of a "select" phase, the
        feature rows (padded rows zeroed)."""
        n, st = len(rows), self.static
        bs = self.bucket(n)
        staged = st.write(None if isinstance(token_ids, torch.Tensor) else token_ids, rows, seq_lens, extend_lens,
                          self.phase.logits, pad_to=bs, width=self.phase.pad_tokens, fill=self.backend.fill_seq_len,
                          read_tokens=self.phase.capacity(bs))
        t_real = int(staged.extend_seq_lens_cpu[:n].sum())
        st.gather_slots(req_to_token, staged.tokens)
        if isinstance(token_ids, torch.Tensor):
            st.input_ids[:t_real].copy_(token_ids.reshape(-1))
        if select is not None:
            st.logits_indices[:n].copy_(select)
        if feature is not None and st.feature is not None:
            st.feature[:t_real].copy_(feature)
            st.feature[t_real : staged.tokens].zero_()
        return self.view(bs, n, t_real, staged.seq_lens_cpu, staged.extend_seq_lens_cpu)

    def view(self, bs: int, n: int, t_real: int, seq_cpu: torch.Tensor, ext_cpu: torch.Tensor) -> ForwardBatch:
        """The captured batch of size ``bs`` as a replay of ``n`` real requests (``t_real``
        real tokens) whose rows are already in ``self.static``. It shares every device tensor
        and the metadata object with the captured batch; only the host copies (used for
        checks, never as kernel arguments: failure class 6) are per replay."""
        return dataclasses.replace(self.batches[bs], seq_lens_cpu=seq_cpu, extend_seq_lens_cpu=ext_cpu,
                                   real_batch_size=n, num_real_tokens=t_real, replay_bs=bs)

    def replay(self, view: ForwardBatch) -> ModelOutput:
        """Replay-init the captured metadata in place, replay, slice the outputs to the real rows."""
        bs = view.replay_bs
        if bs is None or bs not in self.graphs:
            raise ValueError(f"{self.phase.mode.name}: not a view of a captured batch (replay_bs={bs})")
        self.backend.init_replay_metadata(view)
        self.graphs[bs].replay()
        self.replays += 1
        n = view.real_batch_size if view.real_batch_size is not None else bs
        t = view.num_real_tokens if view.num_real_tokens is not None else view.num_tokens
        return self._slice(self.graphs[bs].output, t if self.phase.logits == "all" else (0 if self.phase.logits == "none" else n), t)

    def _slice(self, out: ModelOutput, r: int, t: int) -> ModelOutput:
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

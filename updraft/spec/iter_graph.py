"""The fused speculative iteration's captured graph and its launches' handles: ``IterGraph``
holds one (S, sampled, bs) graph's batches (every forward's static inputs; ``static_batch_of``
builds one, ``fed_batch`` hands a forward its feature), row list, output block and pinned
staging; ``InFlight`` is one launched replay, read one iteration later (``updraft.spec.fused``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from updraft.batch import FeatureKind, ForwardBatch
from updraft.runtime.graphs.device_graph import CudaGraph, EmulatedGraph
from updraft.runtime.graphs.phase_graph import PhaseSpec, phase_inputs, static_batch
from updraft.runtime.launcher import Pending
from updraft.spec.request_view import SpecRequestView
from updraft.spec.row_io import IterLayout


def static_batch_of(phase: PhaseSpec, bs: int, backend: object, device: torch.device, dtype: torch.dtype) -> ForwardBatch:
    """A captured batch over static inputs of its own (each (S, sampled, bs) graph has its own)."""
    return static_batch(phase, phase_inputs(phase, bs, device, dtype), bs, backend, device)


def fed_batch(batch: ForwardBatch, kind: FeatureKind, feat: torch.Tensor, dtype: torch.dtype,
         qkv: torch.Tensor | None = None) -> ForwardBatch:
    """``batch`` reading ``feat`` (the previous forward's output rows, as they lie) as its
    feature (``qkv``: its ``feature_qkv``). A copy into a static feature buffer would be one more
    kernel node per draft forward (five per iteration at S = 5) for nothing: ``feat`` is produced
    by the same body, so a replay reads the tensor its capture recorded. Rows must match
    ``batch``'s tokens."""
    if feat.shape[0] != batch.num_tokens:
        raise AssertionError(f"draft feature has {feat.shape[0]} rows for {batch.num_tokens} tokens")
    return dataclasses.replace(batch, feature=feat if feat.dtype == dtype else feat.to(dtype), feature_kind=kind,
                               feature_qkv=qkv)


@dataclass
class IterGraph:
    """The captured iteration for one (S, sampled, bs)."""

    num_steps: int
    sampled: bool
    bs: int
    rows: torch.Tensor  # [bs] int64 static input
    chain: list[ForwardBatch]
    verify: ForwardBatch  # DECODE (width 1) without a draft
    extend: ForwardBatch | None  # None without a draft
    #: ``extend_rows_beside``: the draft extend's last accepted row of each request, run alone
    #: (DRAFT_DECODE, its inputs written by ``pick_last_rows``); else None
    extend_last: ForwardBatch | None
    layout: IterLayout  # every forward's positions, slots and lengths, written by ``read_rows``
    ids: torch.Tensor  # [bs, S + 1]: the verify block's token ids (a view of its input_ids)
    out: torch.Tensor  # [bs, S + 2] int64: accept_len, then the S + 1 emitted tokens
    rows_host: list[torch.Tensor] = field(default_factory=list)  # pinned staging, two slots
    out_host: list[torch.Tensor] = field(default_factory=list)
    rows_np: list[np.ndarray] = field(default_factory=list)  # numpy views of the slots above
    out_np: list[np.ndarray] = field(default_factory=list)
    #: the request rows ``rows`` holds (stream order: the last copy queued), None: unknown.
    #: Only ``launch`` and ``capture_all`` write ``rows``; both keep this current.
    rows_now: list[int] | None = None
    graph: EmulatedGraph | CudaGraph | None = None

    @property
    def batches(self) -> list[ForwardBatch]:
        """Every forward's batch, the inputs the body writes on each replay."""
        return [b for b in [*self.chain, self.verify, self.extend, self.extend_last] if b is not None]


@dataclass
class InFlight:
    """One launched iteration; ``wait`` returns its results (the only host sync)."""

    reqs: list[SpecRequestView]
    num_steps: int
    sampled: bool
    bs: int
    captured: bool  # the launch captured its graph first (its host time is no iteration's cost)
    out_host: np.ndarray  # [bs, S + 2]: the pinned slot the results are copied into
    done: Pending

    def wait(self) -> tuple[list[int], list[list[int]]]:
        self.done.synchronize()  # out_host is only valid after this (the copy is asynchronous)
        rows = self.out_host[: len(self.reqs)].tolist()
        acc = [r[0] for r in rows]
        return acc, [r[1 : 1 + a] for r, a in zip(rows, acc)]

    def seconds(self) -> float:
        """Device time of the replay (read after ``wait``)."""
        return self.done.seconds()

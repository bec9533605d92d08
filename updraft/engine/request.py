"""A request's state inside the engine, and what the engine reports back for it."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from updraft.sampling_params import SamplingParams
from updraft.spec.stats import SpecStats

if TYPE_CHECKING:
    from updraft.engine.detokenizer import TextStream


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, holds no KV
    RUNNING = "running"  # holds a request row and KV (prefilling or decoding)
    FINISHED = "finished"


@dataclass
class Request:
    """One sequence being generated. ``num_computed`` positions of ``all_ids`` have KV in the
    cache; in decode ``num_computed == len(all_ids) - 1`` (the last token is the next input)."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    prompt: str | None = None
    arrival_time: float = field(default_factory=time.perf_counter)
    output_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: str | None = None  # "stop", "length", "abort", "error"
    error: str | None = None
    row: int | None = None  # request pool row while RUNNING
    num_computed: int = 0
    # True from admission (or re-admission after preemption) until the prefill chunk that covers
    # every known token has run; a resumed request re-prefills prompt + output so far.
    in_prefill: bool = True
    generator: torch.Generator | None = None
    # Key of the counter-based RNG used inside graphs (the request's seed, or one the engine drew).
    rng_seed: int = 0
    output_text: str = ""
    logprobs: list[dict[str, object]] = field(default_factory=list)
    first_token_time: float | None = None
    finish_time: float | None = None
    num_preemptions: int = 0
    spec: SpecStats = field(default_factory=SpecStats)
    max_len: int = 0  # context limit for this request (prompt + output)
    # Set by the engine: detokeniser + stop strings (None: the caller detokenises), whether text
    # is wanted as it is produced (else only at the end, unless stop strings need it), how many
    # output tokens the text covers, and the token ids that end the request (EOS unless ignored,
    # stop_token_ids).
    text: TextStream | None = None
    stream_text: bool = True
    text_pos: int = 0
    stop_ids: frozenset[int] | None = None

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def last_token(self) -> int:
        """The last known token (the next decode input), without copying the history."""
        return self.output_ids[-1] if self.output_ids else self.prompt_ids[-1]

    def tokens(self, start: int, stop: int) -> list[int]:
        """Positions ``start..stop-1`` of prompt + output, copying only those."""
        p = len(self.prompt_ids)
        if stop <= p:
            return self.prompt_ids[start:stop]
        if start >= p:
            return self.output_ids[start - p : stop - p]
        return self.prompt_ids[start:] + self.output_ids[: stop - p]

    @property
    def finished(self) -> bool:
        return self.status == RequestStatus.FINISHED


@dataclass
class StepOutput:
    """What one engine step produced for one request: a delta."""

    request_id: str
    new_token_ids: list[int]
    new_text: str
    finished: bool
    finish_reason: str | None = None
    error: str | None = None
    new_logprobs: list[dict[str, object]] = field(default_factory=list)

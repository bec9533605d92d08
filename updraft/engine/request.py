"""A request's state inside the engine, and what the engine reports back for it."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from updraft.sampling_params import SamplingParams

if TYPE_CHECKING:
    from updraft.engine.detokenizer import TextStream


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, holds no KV
    RUNNING = "running"  # holds a request row and KV (prefilling or decoding)
    FINISHED = "finished"


@dataclass
class SpecStats:
    """Speculative decoding counters of one request (or summed over an engine).

    ``accept_length`` counts the bonus token: tokens emitted per verify step, 1..ndt.
    """

    num_drafts: int = 0  # verify steps
    num_draft_tokens: int = 0  # drafts proposed
    num_accepted_tokens: int = 0  # drafts accepted (bonus not counted)
    accepted_per_pos: list[int] = field(default_factory=list)  # position p accepted count
    # Verify steps that proposed a draft at position p: with adaptive S the steps differ in how
    # many drafts they carry, and a position's rate is over the steps that had one.
    proposed_per_pos: list[int] = field(default_factory=list)

    def record(self, num_proposed: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_proposed
        self.num_accepted_tokens += num_accepted
        for counts in (self.accepted_per_pos, self.proposed_per_pos):
            if len(counts) < num_proposed:
                counts.extend([0] * (num_proposed - len(counts)))
        for p in range(num_accepted):
            self.accepted_per_pos[p] += 1
        for p in range(num_proposed):
            self.proposed_per_pos[p] += 1

    def merge(self, other: SpecStats) -> None:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        for mine, theirs in ((self.accepted_per_pos, other.accepted_per_pos), (self.proposed_per_pos, other.proposed_per_pos)):
            if len(mine) < len(theirs):
                mine.extend([0] * (len(theirs) - len(mine)))
            for p, c in enumerate(theirs):
                mine[p] += c

    @property
    def mean_accept_length(self) -> float:
        """Mean tokens emitted per verify step, counting the bonus token."""
        return (self.num_accepted_tokens + self.num_drafts) / self.num_drafts if self.num_drafts else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts / proposed drafts (bonus not counted)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    def per_position_rate(self) -> list[float]:
        """Per draft position p: verify steps that accepted the draft at p (and so every draft
        before it) / verify steps that proposed one at p. With a fixed S the denominator is
        every verify step; with adaptive S, only those whose S reached p."""
        return [c / n if n else 0.0 for c, n in zip(self.accepted_per_pos, self.proposed_per_pos)]

    def as_dict(self) -> dict[str, object]:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_position": list(self.accepted_per_pos),
            "proposed_per_position": list(self.proposed_per_pos),
            "mean_accept_length": round(self.mean_accept_length, 4),
            "acceptance_rate": round(self.acceptance_rate, 4),
        }


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

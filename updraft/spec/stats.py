"""Speculative decoding counters (per request, or summed over an engine)."""

from __future__ import annotations

from dataclasses import dataclass, field


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

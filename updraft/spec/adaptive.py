"""Adaptive speculation: choose S (drafts per iteration) to maximise expected tokens per second.

Per iteration the engine may run any S of ``choices`` (0 = a plain target step that keeps the
draft current). The expected tokens of an iteration with S drafts are

    E[S] = 1 + sum_{k=1..S} prod_{j<=k} a_j,

where ``a_j`` is the running conditional acceptance of draft position j (accepted given the
drafts before it were), estimated from every verify step with a Beta(2, 2) prior and an
exponential decay (recent content matters more). The cost of S in a bucket (captured batch size,
greedy or sampled: different graphs) is the wall time from one completion to the next when
iterations run back to back (max of device and host work: at large batches the host's
per-iteration work is what a larger S amortises): the median of its last ``window`` samples, so
one stall (a graph capture, a GC pause) cannot price an S out for good; before any such sample,
the device time of the replay. The pick is ``argmax E[S] / cost(S, bucket)``; a pair without a
cost yet is tried first, and every ``explore_every``-th iteration runs the next S in a round
robin (largest first), so every cost stays current and the acceptance of deep positions stays
known even while a smaller S wins.
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from dataclasses import dataclass, field

#: (S, captured batch size, sampled)
_Key = tuple[int, int, bool]


@dataclass
class AdaptiveSteps:
    choices: list[int]  # allowed S values, e.g. [0, 1, 2, 3, 5]
    enabled: bool = True
    explore_every: int = 8
    decay: float = 0.995
    window: int = 5
    switch_margin: float = 0.05
    #: position j (1-based) -> [accepted, trials] with decay
    _acc: dict[int, list[float]] = field(default_factory=dict)
    _samples: dict[_Key, deque[float]] = field(default_factory=dict)
    _device: dict[_Key, float] = field(default_factory=dict)
    _current: dict[tuple[int, bool], int] = field(default_factory=dict)
    _iters: int = 0
    _explored: int = 0
    chosen: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.choices = sorted(set(self.choices))
        if not self.choices:
            raise ValueError("adaptive speculation needs at least one S")

    @property
    def max_steps(self) -> int:
        return self.choices[-1]

    def rate(self, j: int) -> float:
        acc, trials = self._acc.get(j, [0.0, 0.0])
        return (acc + 2.0) / (trials + 4.0)

    def expected_tokens(self, s: int) -> float:
        total, run = 1.0, 1.0
        for j in range(1, s + 1):
            run *= self.rate(j)
            total += run
        return total

    def cost(self, s: int, bs: int, sampled: bool = False) -> float | None:
        samples = self._samples.get((s, bs, sampled))
        if samples:
            return statistics.median(samples)
        return self._device.get((s, bs, sampled))

    def choose(self, bs: int, sampled: bool = False) -> int:
        self._iters += 1
        if not self.enabled or len(self.choices) == 1:
            s = self.max_steps
        elif self._iters % self.explore_every == 0:
            s = self.choices[-1 - self._explored % len(self.choices)]
            self._explored += 1
        else:
            untried = [c for c in reversed(self.choices) if self.cost(c, bs, sampled) is None]
            s = untried[0] if untried else self._best(bs, sampled)
        self.chosen[s] += 1
        return s

    def _best(self, bs: int, sampled: bool) -> int:
        """The S of highest expected tokens per second; the current one stays unless another is
        better by ``switch_margin`` (noisy cost samples would otherwise flip the choice)."""
        def score(c: int) -> float:
            return self.expected_tokens(c) / (self.cost(c, bs, sampled) or 1e-9)

        best = max(self.choices, key=score)
        cur = self._current.get((bs, sampled))
        if cur is not None and score(best) <= score(cur) * (1 + self.switch_margin):
            best = cur
        self._current[(bs, sampled)] = best
        return best

    def record_cost(self, s: int, bs: int, seconds: float, sampled: bool = False) -> None:
        """A completion-to-completion interval of an iteration with S drafts in this bucket."""
        self._samples.setdefault((s, bs, sampled), deque(maxlen=self.window)).append(seconds)

    def record_device(self, s: int, bs: int, seconds: float, sampled: bool = False) -> None:
        """Device time of a replay (the latest): the cost estimate until wall-time samples exist."""
        self._device[(s, bs, sampled)] = seconds

    def record(self, s: int, accept_lens: list[int]) -> None:
        """Every row's accept length (1..S+1) of one finished iteration."""
        if s == 0 or not accept_lens:
            return
        for j in range(1, s + 1):
            st = self._acc.setdefault(j, [0.0, 0.0])
            st[0] *= self.decay
            st[1] *= self.decay
            for a in accept_lens:
                accepted_before = a - 1  # drafts accepted in this row
                if accepted_before >= j - 1:  # position j was tried
                    st[1] += 1
                    st[0] += 1 if accepted_before >= j else 0

    def snapshot(self) -> dict[str, object]:
        return {
            "chosen_s": dict(sorted(self.chosen.items())),
            "acceptance_per_position": [round(self.rate(j), 4) for j in range(1, self.max_steps + 1)],
            "cost_ms": {f"S={s},bs={b}{',sampled' if smp else ''}": round(c * 1e3, 4)
                        for s, b, smp in sorted(set(self._samples) | set(self._device))
                        if (c := self.cost(s, b, smp)) is not None},
        }

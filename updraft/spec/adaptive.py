"""Adaptive speculation: choose S (drafts per iteration) to maximise expected tokens per second.

Per iteration the engine may run any S of ``choices`` (0 = a plain target step that keeps the
draft current). The expected tokens of an iteration with S drafts are

    E[S] = 1 + sum_{k=1..S} prod_{j<=k} a_j,

where ``a_j`` is the running conditional acceptance of draft position j (accepted given the
drafts before it were), estimated from every verify step with a Beta(2, 2) prior and an
exponential decay (recent content matters more). The cost of S in a bucket (captured batch size,
greedy or sampled: different graphs) has two measured parts: the device time of its replay
(CUDA events around every replay; timed at start-up: ``FusedIteration.capture_all``) and the host's work per
iteration in that bucket (completion-to-completion time minus the time spent waiting, whatever
S ran: every iteration is a sample). With overlap the host works while the device runs, so the
cost is ``max(device, host)`` (at large batches the host's per-iteration work is what a larger S
amortises); without, their sum. The device part is the fastest of its last ``window`` samples: a
replay's work is fixed by its graph, and what else lands in its events (the cold first launch of
a graph just captured, a host late to launch after the start event) only adds, so a slow sample
never outweighs honest ones (when start-up timed that first launch, the median of it and one more
sample priced S = 5 at 2.17 ms at bs 24 on the H200, 1.37 ms honest, and adaptive S ran S = 1
there). The host part is the median of its last ``window`` samples, so one stall (a
graph capture, a GC pause) cannot price an S out for good. The pick is
``argmax E[S] / cost(S, bucket)``; a pair without a device time yet is tried first. Every
``explore_every``-th iteration explores: it runs the next S deeper than the current pick (a
round robin, deepest first), since the acceptance of positions past the pick is learnt only by
running them. An S shallower than the pick adds nothing to the acceptance (the pick measures its
positions), only its cost can move: every ``refresh_every``-th exploration runs one of those
instead. With the deepest S the pick, the other explorations run the pick, so exploring costs
~1 / (explore_every * refresh_every) of the iterations. (A round robin over every S every 8th
iteration cost S = 5 about 7% at bs 1 on the H100: adaptive 1.47x against 1.57x pinned.)

With ``explore_budget`` set (the per-phase iteration, where a larger S can cost several plain
steps: a CPU), exploration is priced instead: the first iteration of a bucket runs the smallest
S, an untried S is tried only once the next smaller one has a cost (its own cost extrapolated
linearly from the smallest and the largest measured), and every S other than the best saves up an equal
share of ``explore_budget`` times the best S's cost per iteration of its bucket and runs once
its savings cover its regret, the time it is expected to lose against the best
(``cost - E[S] / best rate``). Exploring then costs at most ``explore_budget`` of the time, an
S that looks better than the best is tried at once, and an expensive S is revisited seldom.
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

#: (S, captured batch size, sampled)
_Key = tuple[int, int, bool]
_K = TypeVar("_K")


@dataclass
class AdaptiveSteps:
    choices: list[int]  # allowed S values, e.g. [0, 1, 2, 3, 5]
    enabled: bool = True
    overlap: bool = True  # host work runs while the device does: cost = max, else sum
    explore_every: int = 8
    refresh_every: int = 8  # every n-th exploration refreshes the cost of an S shallower than the pick
    decay: float = 0.995
    window: int = 5
    switch_margin: float = 0.05
    explore_budget: float | None = None  # priced exploration (see the module docstring)
    #: position j (1-based) -> [accepted, trials] with decay
    _acc: dict[int, list[float]] = field(default_factory=dict)
    _device: dict[_Key, deque[float]] = field(default_factory=dict)
    _host: dict[tuple[int, bool], deque[float]] = field(default_factory=dict)
    _current: dict[tuple[int, bool], int] = field(default_factory=dict)
    _bucket_iters: dict[tuple[int, bool], int] = field(default_factory=dict)
    _last_run: dict[_Key, int] = field(default_factory=dict)
    _iters: int = 0
    _explored: int = 0
    _deeper_runs: int = 0
    _shallower_runs: int = 0
    chosen: Counter[int] = field(default_factory=Counter)
    # Caches for the choice (it reads every S's cost and E[S] per iteration): the minima / medians
    # of the windows above (dropped when a window moves) and E[S] for S = 0, 1, ... (cleared when
    # the acceptance moves). Filled on use: with S pinned nothing reads them.
    _device_min: dict[_Key, float] = field(default_factory=dict)
    _host_med: dict[tuple[int, bool], float] = field(default_factory=dict)
    _expected: list[float] = field(default_factory=list)
    _run: float = 1.0  # prod_{j <= len(_expected) - 1} a_j

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
        ex = self._expected
        if not ex:
            ex.append(1.0)
            self._run = 1.0
        for j in range(len(ex), s + 1):  # the same sums, in the same order, as one loop over 1..s
            self._run *= self.rate(j)
            ex.append(ex[-1] + self._run)
        return ex[s]

    def cost(self, s: int, bs: int, sampled: bool = False) -> float | None:
        """Estimated seconds per iteration of S in this bucket; None before any device time."""
        dev = _window_stat(self._device, self._device_min, (s, bs, sampled), min)
        if dev is None:
            return None
        host = _window_stat(self._host, self._host_med, (bs, sampled), statistics.median)
        host = 0.0 if host is None else host
        return max(dev, host) if self.overlap else dev + host

    def choose(self, bs: int, sampled: bool = False) -> int:
        self._iters += 1
        if not self.enabled or len(self.choices) == 1:
            s = self.max_steps
        elif self.explore_budget is not None:
            s = self._choose_priced(bs, sampled)
        elif self._iters % self.explore_every == 0:
            s = self._explore(bs, sampled)
        else:
            s = self._pick(bs, sampled)
        self.chosen[s] += 1
        return s

    def _pick(self, bs: int, sampled: bool) -> int:
        """An untried S of this bucket (deepest first), else the best."""
        costs = {c: self.cost(c, bs, sampled) for c in self.choices}
        untried = [c for c in reversed(self.choices) if costs[c] is None]
        return untried[0] if untried else self._best(bs, sampled, costs)

    def _explore(self, bs: int, sampled: bool) -> int:
        """An exploring iteration (see the module docstring): the next S deeper than the pick;
        every ``refresh_every``-th time the next shallower one; the pick when there is none."""
        cur = self._current.get((bs, sampled))
        if cur is None:  # no pick in this bucket yet
            return self._pick(bs, sampled)
        self._explored += 1
        deeper = [c for c in reversed(self.choices) if c > cur]
        shallower = [c for c in reversed(self.choices) if c < cur]
        if shallower and self._explored % self.refresh_every == 0:
            self._shallower_runs += 1
            return shallower[(self._shallower_runs - 1) % len(shallower)]
        if deeper:
            self._deeper_runs += 1
            return deeper[(self._deeper_runs - 1) % len(deeper)]
        return self._pick(bs, sampled)

    def _best(self, bs: int, sampled: bool, costs: dict[int, float | None]) -> int:
        """The S of highest expected tokens per second; the current one stays unless another is
        better by ``switch_margin`` (noisy cost samples would otherwise flip the choice)."""
        def score(c: int) -> float:
            return self.expected_tokens(c) / (costs[c] or 1e-9)

        best = max((c for c in self.choices if costs.get(c) is not None), key=score)
        cur = self._current.get((bs, sampled))
        if cur is not None and score(best) <= score(cur) * (1 + self.switch_margin):
            best = cur
        self._current[(bs, sampled)] = best
        return best

    def _choose_priced(self, bs: int, sampled: bool) -> int:
        key = (bs, sampled)
        n = self._bucket_iters[key] = self._bucket_iters.get(key, 0) + 1
        measured = {c: v for c in self.choices if (v := self.cost(c, bs, sampled)) is not None}
        s = self.choices[0]
        if measured:
            s = best = self._best(bs, sampled, dict(measured))
            rate = self.expected_tokens(best) / max(measured[best], 1e-9)
            regret = {c: max(0.0, v - self.expected_tokens(c) / rate)
                      for c, v in self._estimated(measured).items() if c != best}
            if regret:
                # each other S saves up its share of the budget until it covers its regret
                # (an S starts saving when it first becomes a candidate, not when the bucket began)
                share = self.explore_budget * measured[best] / len(regret)  # type: ignore[operator]
                due = {c: (n - self._last_run.setdefault((c, bs, sampled), n - 1)) * share - r for c, r in regret.items()}
                if max(due.values()) >= 0:
                    s = max(due, key=due.__getitem__)
        self._last_run[(s, bs, sampled)] = n
        return s

    def _estimated(self, measured: dict[int, float]) -> dict[int, float]:
        """Measured costs plus the next untried S above the largest measured one, priced on the
        line through the smallest and the largest measured S (no line yet: the same cost, so it
        is tried at once). The widest span: two neighbours' noisy costs can slope any way, and
        a dear S is then priced cheap and explored."""
        out = dict(measured)
        lo, hi = min(measured), max(measured)
        nxt = [c for c in self.choices if c > hi]
        if nxt:
            slope = (measured[hi] - measured[lo]) / (hi - lo) if hi > lo else 0.0
            out[nxt[0]] = measured[hi] + max(0.0, slope) * (nxt[0] - hi)
        return out

    def record_device(self, s: int, bs: int, seconds: float, sampled: bool = False) -> None:
        """Device time of one replay of S in this bucket."""
        self._device.setdefault((s, bs, sampled), deque(maxlen=self.window)).append(seconds)
        self._device_min.pop((s, bs, sampled), None)

    def record_host(self, bs: int, seconds: float, sampled: bool = False) -> None:
        """Host work of one iteration in this bucket (completion to completion, minus waiting)."""
        self._host.setdefault((bs, sampled), deque(maxlen=self.window)).append(seconds)
        self._host_med.pop((bs, sampled), None)

    def record(self, s: int, accept_lens: list[int]) -> None:
        """Every row's accept length (1..S+1) of one finished iteration."""
        if s == 0 or not accept_lens:
            return
        self._expected.clear()
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
            "host_ms": {f"bs={b}{',sampled' if smp else ''}": round(statistics.median(v) * 1e3, 4)
                        for (b, smp), v in sorted(self._host.items()) if v},
            "cost_ms": {f"S={s},bs={b}{',sampled' if smp else ''}": round(c * 1e3, 4)
                        for s, b, smp in sorted(self._device)
                        if (c := self.cost(s, b, smp)) is not None},
        }


def _window_stat(windows: dict[_K, deque[float]], cache: dict[_K, float], key: _K,
                 stat: Callable[[deque[float]], float]) -> float | None:
    """``stat`` of ``windows[key]`` (None: no samples), cached in ``cache`` until it moves."""
    m = cache.get(key)
    if m is None:
        w = windows.get(key)
        if not w:
            return None
        m = cache[key] = stat(w)
    return m

"""Adaptive S: the choice follows expected tokens per second, explores, and does not flap."""

from __future__ import annotations

import pytest

from updraft.spec.adaptive import AdaptiveSteps


def feed(a: AdaptiveSteps, bs: int, costs: dict[int, float], accept: list[int], n: int) -> None:
    for _ in range(n):
        s = a.choose(bs)
        a.record_device(s, bs, costs[s])
        a.record(s, [min(x, s + 1) for x in accept])


def test_picks_long_drafts_when_they_pay_and_plain_steps_when_they_do_not() -> None:
    a = AdaptiveSteps([0, 1, 3, 5], explore_every=1000)
    # every draft accepted, cycles barely dearer than a plain step: S = 5
    feed(a, 1, {0: 1.0, 1: 1.05, 3: 1.1, 5: 1.15}, [6] * 4, 60)
    assert a.choose(1) == 5
    b = AdaptiveSteps([0, 1, 3, 5], explore_every=1000)
    # nothing accepted and each draft costs: S = 0
    feed(b, 8, {0: 1.0, 1: 1.3, 3: 1.8, 5: 2.3}, [1] * 8, 60)
    assert b.choose(8) == 0
    assert b.expected_tokens(5) < 1.3 and b.rate(1) < 0.2


def test_every_s_is_tried_and_deeper_ones_are_revisited() -> None:
    a = AdaptiveSteps([0, 2, 4], explore_every=8)
    seen = []
    for _ in range(48):
        s = a.choose(1)
        seen.append(s)
        a.record_device(s, 1, 1.0 + 0.5 * s)
        a.record(s, [1])
    assert set(seen[:3]) == {0, 2, 4}  # untried first
    # nothing accepted: S = 0 is the pick; every 8th iteration explores a deeper S, a round robin
    # deepest first, so the acceptance of positions 1..4 stays known
    assert [seen[i] for i in range(7, 48, 8)] == [4, 2, 4, 2, 4, 2]
    assert sum(1 for s in seen if s > 0) == 2 + 6


def explore_run(choices: list[int], costs: dict[int, float], accept: list[int], n: int) -> list[int]:
    a = AdaptiveSteps(choices, explore_every=8, refresh_every=8)
    picks = []
    for _ in range(n):
        s = a.choose(1)
        picks.append(s)
        a.record_device(s, 1, costs[s])
        a.record(s, [min(x, s + 1) for x in accept])
    return picks


def test_exploring_below_the_deepest_pick_only_refreshes_costs() -> None:
    """S = 5 wins (everything accepted, cheap drafts). Shallower S add no acceptance evidence, so
    they run only every 8th exploration (1 iteration in 64, each S in turn), not every 8th
    iteration: exploring costs ~1.5% instead of the ~10% of a round robin."""
    picks = explore_run([0, 1, 2, 3, 5], {0: 1.0, 1: 1.1, 2: 1.2, 3: 1.3, 5: 1.5}, [6], 64 * 10)
    rest = picks[-64 * 8:]  # once S = 5 has overtaken S = 3 (the prior's early estimate)
    others = [s for s in rest if s != 5]
    assert len(others) == 8, rest
    assert set(others) == {0, 1, 2, 3}  # every cost refreshed in turn


def test_exploring_above_a_middle_pick_every_time() -> None:
    """S = 2 wins (drafts 3+ rejected, expensive); S = 3 and 5 are explored every 8th iteration
    in turn (their deep positions could start to pay), S = 0 and 1 every 64th."""
    picks = explore_run([0, 1, 2, 3, 5], {0: 1.0, 1: 1.1, 2: 1.2, 3: 2.0, 5: 3.0}, [3], 64 * 5)
    rest = picks[-64 * 4:]
    deeper = [s for s in rest if s > 2]
    shallower = [s for s in rest if s < 2]
    assert rest.count(2) > 0.85 * len(rest)
    assert len(deeper) in (27, 28) and {3, 5} <= set(deeper)
    assert len(shallower) == 4 and set(shallower) == {0, 1}


def test_one_stalled_sample_does_not_price_an_s_out_for_good() -> None:
    """The first interval of S = 5 included a 20x stall (a graph capture). S = 5 is the best
    choice (2 tokens per 1.3 against 1 per 1.0), and once exploration has brought two honest
    samples it is chosen again (an average would stay above 2.0 for 15 samples)."""
    a = AdaptiveSteps([0, 5], explore_every=4)
    a.record_device(5, 1, 20.0)
    for _ in range(200):
        a.record(5, [2])
    picks = []
    for _ in range(40):
        s = a.choose(1)
        picks.append(s)
        a.record_device(s, 1, {0: 1.0, 5: 1.3}[s])
    assert picks[-8:].count(5) >= 7, picks


def test_a_cold_device_sample_gives_way_to_one_honest_one() -> None:
    """The H200 run that priced S = 5 out at bs 24: its start-up sample was a cold replay (2.17
    ms against 1.37 honest; S = 2 and 3 were cold too), S = 1 cost 0.935. With the acceptance measured there (E[5] = 2.86,
    E[1] = 1.65 tokens), one honest S = 5 sample makes it the pick again; the median of the two
    samples (1.77 ms: 1.61 tokens a ms against S = 1's 1.76) would have kept S = 1."""
    a = AdaptiveSteps([0, 1, 2, 3, 5], explore_every=10_000)
    rates = [0.65, 0.68, 0.72, 0.78, 0.81]
    reached = [100_000]  # rows whose first j drafts were accepted: the conditional rates as measured
    for r in rates:
        reached.append(round(reached[-1] * r))
    a.record(5, [j + 1 for j in range(6) for _ in range(reached[j] - (reached[j + 1] if j < 5 else 0))])
    assert a.expected_tokens(5) == pytest.approx(2.86, abs=0.01)
    for s, c in {0: 1.03, 1: 0.935, 2: 1.86, 3: 1.71, 5: 2.17}.items():  # that run's table at bs 24
        a.record_device(s, 24, c * 1e-3)
    assert a.choose(24) == 1
    a.record_device(5, 24, 1.37e-3)
    assert a.cost(5, 24) == pytest.approx(1.37e-3)
    assert a.choose(24) == 5


def test_greedy_and_sampled_costs_are_separate() -> None:
    a = AdaptiveSteps([0, 5], explore_every=10_000)
    for _ in range(200):
        a.record(5, [6])
    for _ in range(5):
        a.record_device(0, 1, 1.0)
        a.record_device(5, 1, 1.2)
        a.record_device(0, 1, 1.0, sampled=True)
        a.record_device(5, 1, 9.0, sampled=True)
    assert a.choose(1) == 5 and a.choose(1, sampled=True) == 0
    assert "S=5,bs=1,sampled" in a.snapshot()["cost_ms"]  # type: ignore[operator]


def test_no_flapping_between_near_equal_choices() -> None:
    """S = 1 (2 tokens per 1.0) and S = 2 (3 tokens per 1.5) tie; both costs are measured with
    3% noise. The choice settles instead of following the noise."""
    a = AdaptiveSteps([1, 2], explore_every=10_000)
    picks = []
    for i in range(200):
        noise = (1.03, 0.97)[(i * 7 + i // 3) % 2]
        a.record_device(1, 1, 1.0 * noise)
        a.record_device(2, 1, 1.5 / noise)
        a.record(2, [3] * 4)
        picks.append(a.choose(1))
    switches = sum(1 for x, y in zip(picks[10:], picks[11:]) if x != y)
    assert switches <= 2, picks


def test_host_work_is_what_a_larger_s_amortises() -> None:
    """Device: S = 0 1.0, S = 5 1.6; the host needs 2.0 per iteration whatever S ran. With
    overlap both cost 2.0 and any acceptance makes S = 5 the pick; without overlap they cost
    3.0 and 3.6, and an acceptance that yields 1.1 tokens per S = 5 iteration does not pay."""
    for overlap, want in ((True, 5), (False, 0)):
        a = AdaptiveSteps([0, 5], overlap=overlap, explore_every=10_000)
        for _ in range(400):
            a.record(5, [1] * 9 + [2])  # first draft accepted one time in ten
        for _ in range(5):
            a.record_device(0, 8, 1.0)
            a.record_device(5, 8, 1.6)
            a.record_host(8, 2.0)
        assert a.choose(8) == want, (overlap, a.snapshot())
    assert a.cost(5, 8) == 3.6 and a.cost(0, 8) == 3.0 and a.cost(5, 16) is None


def priced_run(a: AdaptiveSteps, costs: dict[int, float], accept: float, n: int) -> tuple[list[int], float, float]:
    """``n`` iterations where each draft is accepted with probability ``accept`` (a fixed
    pseudo-random sequence); returns the picks, the time spent and the tokens produced."""
    picks, spent, tokens, x = [], 0.0, 0.0, 0.5
    for _ in range(n):
        s = a.choose(1)
        a.record_device(s, 1, costs[s])
        k = 0
        while k < s:
            x = (x * 9301 + 0.49297) % 1.0
            if x >= accept:
                break
            k += 1
        a.record(s, [k + 1])
        picks.append(s)
        spent += costs[s]
        tokens += k + 1
    return picks, spent, tokens


#: a CPU's per-phase costs in plain steps: every draft step is dear
CPU_COSTS = {0: 1.0, 1: 1.35, 2: 1.7, 3: 2.05, 5: 2.75}


def test_priced_exploration_costs_little_when_drafts_never_pay() -> None:
    """Starts with a plain step, tries S in increasing order, and exploring all S costs a few
    percent of the time, not the ~10% a round robin every 8th iteration would."""
    a = AdaptiveSteps([0, 1, 2, 3, 5], overlap=False, explore_budget=0.02)
    picks, spent, tokens = priced_run(a, CPU_COSTS, 0.0, 400)
    assert picks[:2] == [0, 1]
    assert picks.index(2) > picks.index(1) and 3 not in picks[: picks.index(2) + 1]
    assert spent / tokens < 1.04, (spent / tokens, a.snapshot())
    assert picks[-100:].count(0) >= 95
    b = AdaptiveSteps([0, 1, 2, 3, 5], overlap=False, explore_every=8)
    _, spent_rr, tokens_rr = priced_run(b, CPU_COSTS, 0.0, 400)
    assert spent_rr / tokens_rr > 1.08


def test_priced_exploration_climbs_when_drafts_pay_and_comes_back() -> None:
    """Drafts accepted 95% of the time: long chains win (S = 5 best, S = 3 within 10%) and are
    found; when acceptance drops to nothing, plain steps return; when it comes back, so do long
    chains."""
    a = AdaptiveSteps([0, 1, 2, 3, 5], overlap=False, explore_budget=0.02)
    picks, _, _ = priced_run(a, CPU_COSTS, 0.95, 150)
    assert sum(1 for s in picks[-30:] if s >= 3) >= 24, picks
    picks, _, _ = priced_run(a, CPU_COSTS, 0.0, 200)
    assert picks[-30:].count(0) >= 22, picks
    picks, _, _ = priced_run(a, CPU_COSTS, 0.95, 300)
    assert picks[-30:].count(5) >= 15 and sum(1 for s in picks[-30:] if s >= 3) >= 24, picks

"""The step planner of time-budgeted runs: slow first steps must not shorten the schedule."""

from __future__ import annotations

import pytest

from updraft.train import schedule
from updraft.train.checkpoint import TrainState
from updraft.train.config import TrainConfig


def _run(monkeypatch: pytest.MonkeyPatch, slow_steps: int, slow: float, fast: float, train_seconds: float) -> list[int]:
    """Drive the planner as the training loop does over a simulated clock; the plans it made."""
    clock = [0.0]
    monkeypatch.setattr(schedule.time, "time", lambda: clock[0])
    cfg = TrainConfig(out="x", train_seconds=train_seconds, eval_every=0)
    state = TrainState(warmup=60)
    planner = schedule.StepPlanner()
    plans: list[int] = []
    while state.total_steps is None or state.step < state.total_steps:
        state.step += 1
        clock[0] += slow if state.step <= slow_steps else fast
        if planner.due(state):
            planner.plan(cfg, state, 0.0, None)
            plans.append(state.total_steps)
    return plans


def test_slow_start_does_not_halve_the_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    # 100 steps at 0.2 s, then 0.08 s a step (the H100 run planned at 140-147 ms a step after
    # 150 steps and ran at 82): the last plan, at step 1162 (t = 20 + 1062 * 0.08 = 104.96 s),
    # must time the fast steps only.
    plans = _run(monkeypatch, 100, 0.2, 0.08, 1000.0)
    assert len(plans) == 1 + len(schedule.REPLAN_AFTER)
    assert plans[0] < 5000  # the first plan sees slow steps only
    assert plans[-1] == pytest.approx(1162 + 0.93 * (1000 - 104.96) / 0.08, rel=0.01)


def test_steady_rate_plans_once_in_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    plans = _run(monkeypatch, 0, 0.1, 0.1, 500.0)
    # each plan keeps 7% of the time LEFT in reserve, so later plans grow a little
    assert max(plans) - min(plans) <= 0.02 * plans[0]

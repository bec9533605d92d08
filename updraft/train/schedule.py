"""The learning-rate schedule of ``updraft train-draft`` and the planner that fixes its length
for a time-budgeted run (``--train-seconds`` across runs, or one run's ``--time-budget``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from updraft.train.checkpoint import TrainState
from updraft.train.config import TrainConfig

CALIBRATION_STEPS = 12  # timed steps before the step count of a time-budgeted run is planned
#: Steps after each plan at which it is made again, each from the steps since the previous plan
#: only: the first few hundred steps run up to twice as slow as the rest (allocator growth, kernel
#: heuristics for each new batch shape), and a plan that averages them in fills half the time
#: (H100, 2026-11-25: planned at 140-147 ms/step, ran at 82).
REPLAN_AFTER = (150, 1000)


def lr_at(cfg: TrainConfig, step: int, total: int | None, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from ``lr`` to ``lr * min_lr_ratio`` at
    ``total`` (unknown total: the peak)."""
    if warmup and step < warmup:
        return cfg.lr * (step + 1) / warmup
    if total is None:
        return cfg.lr
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def rewarm_factor(cfg: TrainConfig, step: int, rewarm_from: int | None) -> float:
    """``--resume-from`` starts a fresh optimizer mid-schedule: the schedule's LR is ramped up
    linearly over ``rewarm_steps`` from the step the run started at (1 otherwise)."""
    if rewarm_from is None or cfg.rewarm_steps == 0:
        return 1.0
    return min(1.0, (step - rewarm_from + 1) / cfg.rewarm_steps)


def plan_schedule(cfg: TrainConfig, state: TrainState, num_batches: int) -> None:
    """A new schedule's length (fixed steps, epochs, or left to the planner) and warm-up."""
    state.warmup = cfg.warmup_steps
    if cfg.steps is not None:
        state.total_steps = cfg.steps
    elif cfg.time_budget is None and cfg.train_seconds is None:
        state.total_steps = max(1, math.ceil(cfg.epochs * num_batches))
    if state.total_steps is not None:
        state.warmup = min(cfg.warmup_steps, state.total_steps // 10)


@dataclass
class StepPlanner:
    """A time-budgeted run fixes its step count (and with it the LR schedule) after
    CALIBRATION_STEPS timed steps, then plans again REPLAN_AFTER[i] steps after each plan, timing
    only the steps since that plan (see REPLAN_AFTER). Each new plan changes the cosine's length
    early in the schedule, where its LR has barely moved. A schedule loaded by --resume stays as
    it is."""

    calib_start: tuple[int, float] | None = None
    replans: int = 0  # plans made after the first
    planning: bool = False  # this run planned the schedule and has re-plans left

    def due(self, state: TrainState) -> bool:
        if state.total_steps is not None and not self.planning:
            return False
        if self.calib_start is None or (state.total_steps is None and state.step == 2):
            self.calib_start = (state.step, time.time())
            return False
        done = state.step - self.calib_start[0]
        if state.total_steps is None:
            return done >= CALIBRATION_STEPS
        return done >= REPLAN_AFTER[self.replans]

    def plan(self, cfg: TrainConfig, state: TrainState, train_start: float, train_deadline: float | None) -> float:
        """Plan (again); returns the seconds per step it planned with."""
        assert self.calib_start is not None
        now = time.time()
        per_step = (now - self.calib_start[1]) / (state.step - self.calib_start[0])
        first = state.total_steps is None
        state.total_steps = plan_steps(cfg, state.step, per_step, train_start, train_deadline)
        if first:
            state.warmup = min(state.warmup, max(state.step, state.total_steps // 10))
        else:
            self.replans += 1
        self.planning = self.replans < len(REPLAN_AFTER)  # else the schedule stays fixed (and on --resume)
        self.calib_start = (state.step, now)
        return per_step


def plan_steps(cfg: TrainConfig, step: int, per_step: float, train_start: float, train_deadline: float | None) -> int:
    """The step count that fills the planned training time at ``per_step`` seconds a step:
    ``train_seconds`` of the whole schedule (across --resume runs), else this run's deadline;
    a share is kept for the held-out evaluations."""
    if cfg.train_seconds is not None:
        left = max(0.0, cfg.train_seconds - (time.time() - train_start))
    else:
        left = max(0.0, (train_deadline or time.time()) - time.time())
    evals = (left / per_step) / cfg.eval_every if cfg.eval_every else 0
    return step + max(1, int(0.93 * left / per_step - 2 * evals))

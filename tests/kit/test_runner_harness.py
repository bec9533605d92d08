"""The production-runner checks on the tiny engine (torch_native, emulated graphs): they pass on
the real code, and they fail when a graph silently stops running or returns stale rows; the fused
iteration's column likewise, and it fails when padded rows leave their row dirty or a batch above
the largest graph is not refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from updraft.kit.fused_harness import FusedRig
from updraft.kit.runner_harness import RunnerRig, rotated_batches, run_runner_checks, subsets
from updraft.runtime.graphs.phase_graph import PhaseGraphRunner
from updraft.runtime.row_state import RowState
from updraft.spec.fused import FusedIteration


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> RunnerRig:
    return RunnerRig("torch_native", "v2", torch.device("cpu"), "float32", tmp_path_factory.mktemp("head") / "h", None, "eagle3")


def test_every_column_passes_and_cross_replay_runs(rig: RunnerRig) -> None:
    assert any(r.row is not None and r.seq_len == 63 for r in rig.reqs)  # the request at the table's end
    for col in ("draft decode", "draft chain", "draft extend v2", "verify"):
        for reqs in subsets(rig.reqs, col, "quick"):
            chk = rig.check(col, reqs, "t", seed=1)
            assert chk.ok, chk.describe()
        # The pool-isolation check is meaningful on real CUDA graphs only; its path runs here.
        assert rig.cross_replay(col, 4, "t").ok


def test_mtp_columns_pass(tmp_path: Path) -> None:
    """An MTP head (two modules, cycled at S = 3): one DRAFT_DECODE graph per step, the chain,
    the v2 extend with the modules' states as its aux rows, the states left behind."""
    mtp = RunnerRig("torch_native", "v2", torch.device("cpu"), "float32", tmp_path / "h",
                    ["draft decode", "draft chain", "draft extend v2"], "mtp")
    for col in ("draft decode", "draft chain", "draft extend v2"):
        for reqs in subsets(mtp.reqs, col, "quick"):
            chk = mtp.check(col, reqs, "t", seed=1)
            assert chk.ok, chk.describe()


def test_a_graph_that_never_runs_is_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PhaseGraphRunner, "can_run", lambda self, batch: (False, "refused by the test"))
    res = run_runner_checks("torch_native", "cpu", ["verify", "draft extend v2"], tier="quick")
    for col, checks in res.items():
        bad = [c for c in checks if not c.ok]
        # bs 5 falls back anyway (that one is right); the others must report the silent fallback.
        assert len(bad) == len(checks) - 1, (col, [c.describe() for c in checks])
        assert "did not run" in bad[0].detail and "refused by the test" in bad[0].detail


def test_stale_graph_rows_are_caught(rig: RunnerRig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay whose hidden rows come from the previous replay (a stale static output)."""
    real = PhaseGraphRunner._slice

    def stale(self, out, r, t):  # noqa: ANN001, ANN202
        res = real(self, out, r, t)
        if res.hidden is not None and res.hidden.shape[0] > 1:
            res.hidden = res.hidden.roll(1, 0)  # rows swapped between requests
        return res

    monkeypatch.setattr(PhaseGraphRunner, "_slice", stale)
    chk = rig.check("draft extend v2", subsets(rig.reqs, "draft extend v2")[0], "t", seed=2)
    assert not chk.ok and "hidden" in chk.detail


@pytest.fixture(scope="module", params=["eagle", "eagle3", "mtp"])
def fused_rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> FusedRig:
    return FusedRig("torch_native", torch.device("cpu"), "float32", tmp_path_factory.mktemp("fused") / "h", request.param)


def _fused_batches(rig: FusedRig) -> list[list]:
    greedy = [r for r in rig.reqs if r.params.greedy]
    return rotated_batches(greedy, "full") + rotated_batches(rig.reqs, "full")


def test_fused_iteration_column_passes_and_cross_replay_runs(fused_rig: FusedRig) -> None:
    assert any(not r.params.greedy for r in fused_rig.reqs) and any(r.seq_len == 63 for r in fused_rig.reqs)
    for s in fused_rig.steps:
        for reqs in _fused_batches(fused_rig):
            chk = fused_rig.check(reqs, f"S {s}", s)
            assert chk.ok, chk.describe()
    assert {k[1] for k in fused_rig.fused.graphs} == {False, True}  # greedy and sampled graphs ran
    if fused_rig.eng.config.speculative.method == "eagle":  # the agreeing head: every accept length
        assert set(fused_rig.greedy_accepts) == {1, 2, 3, 4}, fused_rig.greedy_accepts
    # Meaningful on real CUDA graphs only; its path runs here.
    assert fused_rig.cross_replay(_fused_batches(fused_rig)[0], "t", fused_rig.steps[0]).ok


def test_fused_padding_row_left_dirty_is_caught(fused_rig: FusedRig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 0 is every padded row's state; a replay that does not reset it is a failure even
    though the real rows' results are right (the row drifts until its positions leave the table)."""
    from updraft.spec import commit

    # the torch commit (the padded requests write row 0 there) without its reset: the kernel
    # path resets row 0 itself (its own mutations are killed by tests/spec/test_commit.py)
    monkeypatch.setattr(commit, "use_triton", lambda t: False)
    monkeypatch.setattr(RowState, "reset_padding", lambda self: None)
    padded = _fused_batches(fused_rig)[1]  # 3 requests on the graph of 4
    chk = fused_rig.check(padded, "t", fused_rig.steps[0])
    assert not chk.ok and "padding row 0 left at seq_len" in chk.detail, chk.describe()


def test_fused_batch_above_the_graphs_must_be_refused(fused_rig: FusedRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FusedIteration, "can_run", lambda self, reqs: (True, ""))
    five = _fused_batches(fused_rig)[2]
    chk = fused_rig.check(five, "t", fused_rig.steps[0])
    assert len(five) == 5 and not chk.ok and "can_run accepted bs 5" in chk.detail, chk.describe()

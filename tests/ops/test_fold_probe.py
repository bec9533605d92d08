"""``benchmarks/fold_probe.py`` (issue 14's K-split folds) on tiny shapes under the interpreter: both
folds, and production beside them, give the MLP's and the merge + o_proj's float64 outputs, so the
times the probe reports on a GPU are of kernels that compute the layer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def test_fold_probe_smoke(tmp_path: Path, load_benchmark: Callable[[str], Any]) -> None:
    probe = load_benchmark("fold_probe")
    out = tmp_path / "fold.json"
    assert probe.main(["--smoke", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["probe"], r["rows"], r["variant"].split()[0]) for r in rows} == {
        (p, m, v) for m in (1, 6) for p, v in (("mlp", "gate_up"), ("mlp", "fold"), ("oproj", "merge"), ("oproj", "fold"))}
    assert all(r["rel_err"] < 1e-5 for r in rows), rows


def test_fold_probe_rejects_unknown_probes(load_benchmark: Callable[[str], Any]) -> None:
    with pytest.raises(ValueError, match="allowed: mlp, oproj"):
        load_benchmark("fold_probe").main(["--smoke", "--probes", "mlp,qkv"])

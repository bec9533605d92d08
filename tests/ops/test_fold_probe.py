"""``benchmarks/fold_probe.py`` (issue 14's K-split folds, issue 15's MLA merge + V up-projection) on
tiny shapes under the interpreter: every fold, and production beside it, gives the float64 output
of what it replaces, so the times the probe reports on a GPU are of kernels that compute the layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
        (p, m, v) for m in (1, 6) for p, v in (("mlp", "gate_up"), ("mlp", "fold"), ("oproj", "merge"), ("oproj", "fold"))
    } | {("mla_uv", m, v) for m in (1, 3) for v in ("merge", "fold")}
    assert all(r["rel_err"] < 1e-5 for r in rows), rows


def test_fold_probe_rejects_unknown_probes(load_benchmark: Callable[[str], Any]) -> None:
    with pytest.raises(ValueError, match="allowed: mlp, oproj, mla_uv"):
        load_benchmark("fold_probe").main(["--smoke", "--probes", "mlp,qkv"])


def test_fold_probe_kernels_compile_for_h100() -> None:
    """The interpreter accepts code the compiler rejects: both fold kernels at the GPU sweep's smallest
    and largest tiles, compiled for sm_90 in a subprocess without TRITON_INTERPRET."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-W", "ignore", str(root / "benchmarks" / "fold_probe.py"), "--compile-check"],
                          env=env, cwd=root, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 and "ptxas" in log and "not found" in log:
        pytest.skip(f"no CUDA compile toolchain in this triton install: {log[-400:]}")
    assert proc.returncode == 0 and "specializations compiled for sm_90" in proc.stdout, log[-3000:]

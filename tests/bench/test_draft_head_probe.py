"""``benchmarks/draft_head_probe.py`` (interpreter smoke): the probe kernel's pick, with and without
the norm prologue, equals the float64 argmax mapped to target ids, like production's cuBLAS +
``argmax_rows``; the ``fc`` variants agree with float64."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def test_probe_smoke(tmp_path: Path, load_benchmark: Callable[[str], Any]) -> None:
    out = tmp_path / "probe.json"
    assert load_benchmark("draft_head_probe").main(["--smoke", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    picks = [r for r in rows if "pick_ok" in r]
    assert {r["variant"] for r in picks} >= {"cublas + argmax", "probe n8 k16 w2", "probe n8 k16 w2 norm"}
    assert all(r["pick_ok"] for r in picks)
    fcs = [r for r in rows if r["variant"].startswith("fc")]
    assert len(fcs) == 2 and all(r["rel_err"] < 1e-2 for r in fcs)

"""``benchmarks/draft_head_probe.py`` (interpreter smoke): the probe kernel's pick, with and without
the norm prologue, equals the float64 argmax mapped to target ids, like production's cuBLAS +
``argmax_rows``; the ``fc`` variants agree with float64."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_probe_smoke(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("draft_head_probe", BENCH / "draft_head_probe.py")
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    out = tmp_path / "probe.json"
    assert probe.main(["--smoke", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    picks = [r for r in rows if "pick_ok" in r]
    assert {r["variant"] for r in picks} >= {"cublas + argmax", "probe n8 k16 w2", "probe n8 k16 w2 norm"}
    assert all(r["pick_ok"] for r in picks)
    fcs = [r for r in rows if r["variant"].startswith("fc")]
    assert len(fcs) == 2 and all(r["rel_err"] < 1e-2 for r in fcs)

"""The benchmark scripts of the triton backend (``benchmarks/attention_bench.py``,
``prefill_sweep.py``) run end to end on tiny shapes under the Triton CPU interpreter: plumbing and
correctness checks only, their timings mean nothing here. As ``test_triton.py``, TRITON_INTERPRET is
set at the very top on a CPU-only machine and the module skips itself where kernels would compile."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch  # does not import triton

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("CUDA is present: these run under the CPU interpreter (TRITON_INTERPRET=1)", allow_module_level=True)


def test_bench_script_smoke(tmp_path: Path, load_benchmark: Callable[[str], Any]) -> None:
    """benchmarks/attention_bench.py parses its arguments and runs end to end on tiny shapes
    (interpreter: plumbing and correctness checks only; the timings mean nothing here)."""
    bench = load_benchmark("attention_bench")
    assert bench.parse_args(["--only", "prefill", "--repeats", "5"]).repeats == 5
    out = tmp_path / "bench.json"
    assert bench.main(["--smoke", "--warmup", "0", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["decode"]) == 2 and len(data["verify"]) == 1 and len(data["prefill"]) == 3
    assert all(r["rel_err_req0"] < 2e-2 for r in data["decode"] + data["verify"])
    assert all(r["rel_err_vs_sdpa"] < 2e-2 for r in data["prefill"])


def test_prefill_sweep_smoke(load_benchmark: Callable[[str], Any]) -> None:
    """benchmarks/prefill_sweep.py's shape sweep on tiny shapes (interpreter): the production
    tile first, each candidate's splits and error against SDPA recorded, a prefix case and a
    fresh prompt (one split: an eager extend without a prefix)."""
    from updraft.attention.triton_kernels import TileConfig as Tile

    sweep = load_benchmark("prefill_sweep")
    args = sweep.argparse.Namespace(repeats=1, warmup=0, inner=1, as_graph=False)
    rows = sweep.sweep_shape((4, 2, 32), 1, 20, 40, [Tile(16, 16, 32, 1, 1)], args, torch.device("cpu"))
    rows += sweep.sweep_shape((4, 2, 32), 2, 0, 24, [], args, torch.device("cpu"))
    args.as_graph = True  # as a prefill graph plans it: the split policy, the last split writing the output
    rows += sweep.sweep_shape((4, 2, 32), 1, 0, 24, [], args, torch.device("cpu"))
    assert [r["production"] for r in rows] == [True, False, True, True]
    assert all(not r["bad"] and r["rel_err"] < 2e-2 for r in rows)
    assert rows[2]["splits"] == 1 and rows[3]["splits"] > 1

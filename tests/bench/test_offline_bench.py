"""`updraft bench` runs with and without speculation side by side and writes JSON + plots."""

from __future__ import annotations

import json

from updraft.bench.offline import accept_histogram
from updraft.cli import main
from updraft.spec.stats import SpecStats


def test_bench_side_by_side(tiny_checkpoint, tmp_path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "res"
    code = main([
        "bench", "--model", str(tiny_checkpoint("llama")), "--no-progress", "--speculative-algorithm", "NGRAM",
        "--speculative-num-steps", "3", "--num-prompts", "4", "--output-len", "12", "--batch-sizes", "1,2",
        "--graph-emulate", "--out", str(out),
        "--speculative-disable-adaptive",  # the draft / verify phases below must run, whatever a busy CPU's timings say
        "--disable-fused-iteration",  # n-gram would run fused (one graph per iteration, no phases to time)
    ])
    assert code == 0
    printed = capsys.readouterr().out
    assert "speculation speedup at bs 1" in printed and "accept per position" in printed
    res = json.loads((out / "bench.json").read_text())
    assert set(res["runs"]) == {"plain", "spec"}
    spec = res["runs"]["spec"]["1"]
    assert spec["output_tokens"] == 4 * 12 and "verify" in spec["phases"] and "draft" in spec["phases"]
    assert sum(spec["spec"]["accept_length_histogram"]) == spec["spec"]["num_drafts"]
    assert res["runs"]["plain"]["1"]["graph_hit_rate"] == 1.0
    assert res["runs"]["plain"]["bandwidth_bs1"]["path"] == "DECODE graph", "the plain step's figure is a replay"
    assert "bs 1 decode step" in printed and "(DECODE graph)" in printed
    assert (out / "throughput.png").is_file() and (out / "phases.png").is_file()


def test_accept_histogram_from_per_position_counts() -> None:
    s = SpecStats()
    for acc in (0, 3, 1, 3, 2):
        s.record(3, acc)
    assert accept_histogram(s, 3) == [1, 1, 1, 2]  # accept lengths 1, 2, 3, 4


def test_random_model_with_transformers_peer(tmp_path, capsys) -> None:  # noqa: ANN001
    """A random-weight model built in-process, and transformers given exactly its weights: the
    greedy outputs agree token for token (fp32)."""
    out = tmp_path / "peer"
    code = main([
        "bench", "--model", "random:tiny", "--device", "cpu", "--no-progress", "--num-prompts", "3", "--input-len", "12",
        "--output-len", "10", "--batch-sizes", "1", "--peer", "transformers", "--peer-modes", "eager", "--out", str(out),
    ])
    assert code == 0
    res = json.loads((out / "bench.json").read_text())
    for key in ("eager_bs1", "eager_bs8"):
        assert res["peer"][key]["agreement_with_updraft"]["identical"] == 1.0
    assert "transformers eager bs 1" in capsys.readouterr().out

"""``benchmarks/train_step.py`` on CPU: the trainer's step timed at two batch sizes in one process,
each over batches it warmed up on (padded as asked), then over batches it had not met, then over
batches built inside the timed loop as the trainer builds them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def test_train_step_smoke(tmp_path: Path, load_benchmark: Callable[[str], Any]) -> None:
    args = ["--target", "random:tiny", "--device", "cpu", "--steps", "2", "--warmup", "1", "--batch-tokens", "256,512",
            "--seqs", "100", "--min-len", "16", "--max-len", "48", "--lengths", "uniform", "--draft-vocab", "128", "--shapes", "3",
            "--pad", "16", "--cold", "2", "--loop", "2", "--sdpa", "no-cudnn", "--out", str(tmp_path)]
    assert load_benchmark("train_step").main(args) == 0
    result = json.loads((tmp_path / "train_step.json").read_text())
    assert result["precision"] == "fp32" and result["compile"] is False and result["sdpa"] == "no-cudnn" and result["draft_vocab"] == 128
    runs = result["runs"]
    assert [r["batch_tokens"] for r in runs] == [256, 512]
    for r in runs:
        assert 1 <= len(r["shapes"]) <= 3 and r["pad"] == 16
        assert all(length % 16 == 0 and rows * (length - 15) <= r["batch_tokens"] for rows, length in r["shapes"])
        assert r["cold_steps"] == 2 and r["cold_ms_per_step"] > 0
        assert r["loop_steps"] == 2 and r["loop_ms_per_step"] > 0
        assert r["ms_per_step"] > 0 and 0 < r["positions_per_step"] <= r["batch_tokens"]

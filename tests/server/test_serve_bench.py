"""``benchmarks/serve_bench.py`` end to end against a small speculative server: bounded run,
JSON report with throughput, latency percentiles and accept length."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from server_kit import LiveServer, make_engine

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_bench.py"


def test_serve_bench_reports_json(tiny_folder: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"Tell me about draft model number {i}"}) + "\n" for i in range(5)
        )
    )
    server = LiveServer(
        make_engine(
            tiny_folder, speculative_config={"method": "ngram", "num_speculative_tokens": 3}
        )
    )
    try:
        out = tmp_path / "report.json"
        proc = subprocess.run(
            [
                sys.executable,
                str(SCRIPT),
                "--url",
                server.url,
                "--prompts",
                str(prompts),
                "--num-prompts",
                "12",
                "--request-rates",
                "20,inf",
                "--max-tokens",
                "16",
                "--ignore-eos",
                "--max-duration",
                "30",
                "--output",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["model"] == "tiny"
    assert [r["request_rate"] for r in report["results"]] == [20.0, "inf"]
    for r in report["results"]:
        assert r["completed"] == 12 and r["failed"] == 0
        assert r["total_output_tokens"] == 12 * 16
        assert r["output_token_throughput"] > 0
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert set(r[key]) == {"mean", "p50", "p90", "p99"}
            assert 0 < r[key]["p50"] <= r[key]["p90"] <= r[key]["p99"]
        assert r["accept_length"]["server"] >= 1 and r["accept_length"]["per_request_mean"] >= 1
    # refuses anything but 127.0.0.1, before sending anything
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", "http://192.0.2.1:8000"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "only servers on 127.0.0.1" in bad.stderr

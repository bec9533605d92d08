"""The `updraft` command: real generation with a tiny model, and one-line errors (exit 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from updraft.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "updraft.cli", *args], capture_output=True, text=True, timeout=300)


def test_generate_prints_text_rate_and_ttft(tiny_checkpoint) -> None:  # noqa: ANN001
    r = run_cli("generate", "--model", str(tiny_checkpoint("llama")), "--prompt", "hello", "--max-tokens", "8",
                "--ignore-eos", "--no-progress", "--speculative-algorithm", "NGRAM", "--speculative-num-steps", "3")
    assert r.returncode == 0, r.stderr
    assert "tok/s" in r.stderr and "TTFT" in r.stderr and "mean accept length" in r.stderr
    assert r.stdout.strip()


def test_generate_compare_plain_side_by_side(tiny_checkpoint, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    """--compare-plain: the same request without speculation, both rates on one line, and the
    greedy outputs are identical (fp32)."""
    code = main(["generate", "--model", str(tiny_checkpoint("llama")), "--prompt", "hello", "--max-tokens", "12",
                 "--ignore-eos", "--no-progress", "--speculative-algorithm", "NGRAM", "--speculative-num-steps", "3",
                 "--compare-plain"])
    err = capsys.readouterr().err
    assert code == 0, err
    line = next(x for x in err.splitlines() if x.startswith("[side by side"))
    assert "speculative" in line and "plain" in line and "x |" in line and "outputs identical (greedy)" in line, line
    assert line.startswith("[side by side (2 runs each, alternating):"), line  # CPU: both engines run twice


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "/no/such/model"], "/no/such/model"),
        (["--temperature", "-1"], "temperature"),
        (["--top-p", "0"], "top_p"),
        (["--top-k", "-5"], "top_k"),
        (["--max-tokens", "0"], "max_tokens"),
        (["--page-size", "0"], "page_size"),
        (["--speculative-config", "{not json"], "not valid JSON"),
        (["--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 5}'], "draft model"),
        (["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "4", "--speculative-draft-model-path", "x"], "topk=4"),
        (["--speculative-algorithm", "NGRAM", "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "7"], "num_draft_tokens=7"),
        (["--speculative-algorithm", "MEDUSA"], "MEDUSA"),
        (["--speculative-algorithm", "NGRAM", "--speculative-context-vocab", "64"], "context_vocab=64 is for EAGLE-3"),
        (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "x", "--speculative-context-vocab", "-1"],
         "context_vocab=-1 is invalid"),
        (["--attention-backend", "flash"], "flash"),
        (["--compare-plain"], "--compare-plain needs speculative decoding"),
    ],
)
def test_errors_are_one_line(tiny_checkpoint, capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:  # noqa: ANN001
    base = ["generate", "--prompt", "hi", "--no-progress"]
    if "--model" not in args:
        base += ["--model", str(tiny_checkpoint("llama"))]
    code = main(base + args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err


def test_corrupt_checkpoint_is_one_line(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 50)
    assert main(["generate", "--model", str(bad), "--prompt", "hi", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken.gguf" in err[0]


def test_empty_prompt_and_long_prompt(tiny_checkpoint, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    model = str(tiny_checkpoint("llama"))
    assert main(["generate", "--model", model, "--prompt", "", "--no-progress"]) == 2
    assert "empty" in capsys.readouterr().err
    assert main(["generate", "--model", model, "--prompt", "x" * 600, "--max-model-len", "64", "--no-progress"]) == 2
    assert "context" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["generate", "bench", "serve", "kit", "train-draft"])
def test_every_commands_help_renders(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` of each command prints and exits 0: argparse formats help texts with %, so a
    literal one in a config field's help (``train-draft``'s "~6% more padded tokens") broke it."""
    from updraft.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0 and "usage:" in capsys.readouterr().out

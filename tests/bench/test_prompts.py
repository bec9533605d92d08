"""``updraft.bench.prompts``: the prompt rows of a JSONL set, with their categories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from updraft.bench.prompts import PromptRow, load_prompt_rows, load_prompts


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    return path


def test_rows_keep_first_turns_and_categories(tmp_path: Path) -> None:
    f = _write(tmp_path / "set.jsonl", [
        {"turns": ["first", "second"], "category": "writing"},
        {"prompt": "a prompt"},
        {"text": "a text", "category": 7},
        {"turns": ["more"], "category": "math"},
    ])
    assert load_prompt_rows(str(f)) == [PromptRow("first", "writing"), PromptRow("a prompt"), PromptRow("a text", "7"),
                                         PromptRow("more", "math")]
    assert load_prompt_rows(str(f), limit=2) == [PromptRow("first", "writing"), PromptRow("a prompt")]
    assert load_prompts(str(f)) == ["first", "a prompt", "a text", "more"]


def test_bad_rows_name_the_line(tmp_path: Path) -> None:
    f = _write(tmp_path / "bad.jsonl", [{"turns": ["ok"]}, {"question": "no text"}])
    with pytest.raises(ValueError, match=r"bad.jsonl:2 has no 'turns', 'prompt' or 'text'"):
        load_prompt_rows(str(f))
    with pytest.raises(FileNotFoundError, match="not found"):
        load_prompt_rows(str(tmp_path / "missing.jsonl"))

"""Prompt sets for tests and benchmarks: the EAGLE papers' evaluation sets (read in place from
``../shared/data/eagle-eval`` or ``$UPDRAFT_EVAL_DIR``; never copied into the project) and plain
JSONL files."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

EVAL_SETS = ("mt_bench", "humaneval", "gsm8k", "alpaca", "sum", "qa")


def eval_dir() -> Path:
    env = os.environ.get("UPDRAFT_EVAL_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data" / "eagle-eval"


@dataclass(frozen=True)
class PromptRow:
    """One prompt of a set: its first turn, and the row's ``category`` where it has one (mt_bench's
    writing, roleplay, reasoning, math, coding, extraction, stem, humanities)."""

    text: str
    category: str | None = None


def load_prompt_rows(name_or_path: str, limit: int | None = None) -> list[PromptRow]:
    """First-turn prompts (with categories) of an eval set name (e.g. ``sum``) or of a JSONL file
    whose rows have ``turns`` (list), ``prompt`` or ``text``, and optionally ``category``."""
    path = Path(name_or_path)
    if name_or_path in EVAL_SETS:
        path = eval_dir() / f"{name_or_path}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {path} not found")
    out: list[PromptRow] = []
    with path.open() as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{i + 1} is not valid JSON: {exc.msg}") from None
            if isinstance(row, dict) and row.get("turns"):
                text = str(row["turns"][0])
            elif isinstance(row, dict) and ("prompt" in row or "text" in row):
                text = str(row.get("prompt", row.get("text")))
            else:
                raise ValueError(f"{path}:{i + 1} has no 'turns', 'prompt' or 'text'")
            category = row.get("category")
            out.append(PromptRow(text, str(category) if category is not None else None))
            if limit is not None and len(out) >= limit:
                break
    return out


def load_prompts(name_or_path: str, limit: int | None = None) -> list[str]:
    """First-turn prompts of an eval set name (e.g. ``sum``) or of a JSONL file whose rows have
    ``turns`` (list), ``prompt`` or ``text``."""
    return [r.text for r in load_prompt_rows(name_or_path, limit)]

"""Draft heads shipped with updraft as package data, addressed as ``builtin:NAME`` wherever a
draft model path goes (``--speculative-draft-model-path builtin:smollm2``, the ``model`` key of
a speculative config).

* ``smollm2``: EAGLE-3 head for SmolLM2-135M-Instruct (the default model), trained by
  ``updraft train-draft --method eagle3`` (see the folder's README.md for how and what it
  measured). Its embedding is the target's; its LM head covers an 8,192-token draft vocabulary.
  Serve it with method ``eagle3`` (``--speculative-algorithm EAGLE3``).
"""

from __future__ import annotations

from pathlib import Path

from updraft.errors import ModelNotFoundError

PREFIX = "builtin:"
#: name -> (folder inside this package, speculative method)
BUILTIN_HEADS = {"smollm2": ("smollm2-135m-instruct-eagle3", "eagle3")}


def builtin_head_path(name: str) -> Path:
    """The folder of a shipped head, by its short name."""
    if name not in BUILTIN_HEADS:
        raise ModelNotFoundError(f"unknown builtin draft head {name!r}: available {', '.join(PREFIX + n for n in BUILTIN_HEADS)}")
    folder = Path(__file__).resolve().parent / BUILTIN_HEADS[name][0]
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"builtin draft head {name!r} is missing from the installation ({folder})")
    return folder


def resolve_draft_path(path: str) -> str:
    """``builtin:NAME`` -> the shipped folder; anything else unchanged."""
    if path.startswith(PREFIX):
        return str(builtin_head_path(path[len(PREFIX) :]))
    return path

"""Fixtures of the HTTP tests (helpers live in ``server_kit``, importable from here)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests use `from server_kit import ...`

from server_kit import LiveServer, make_engine  # noqa: E402


@pytest.fixture(scope="session")
def tiny_folder(tiny_checkpoint: Any) -> Path:
    return tiny_checkpoint("llama")


@pytest.fixture(scope="module")
def live(tiny_folder: Path) -> Iterator[LiveServer]:
    """A plain (non-speculative) server over the tiny model, fault injection on."""
    server = LiveServer(make_engine(tiny_folder), enable_fault_injection=True)
    yield server
    server.close()

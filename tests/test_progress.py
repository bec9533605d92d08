"""``updraft.progress``: bars for a terminal, nothing in logs."""

from __future__ import annotations

import io

import pytest

from updraft import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_draw_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UPDRAFT_PROGRESS", raising=False)
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    bar = progress.bar(3, "Working", unit="step")
    assert bar is not None
    bar.update(3)
    bar.close()
    assert "Working" in tty.getvalue() and "3/3" in tty.getvalue()
    assert progress.bar(3, "Working", enabled=False) is None  # the caller's --no-progress
    log = io.StringIO()  # a file, a pipe, a journal: not a terminal
    monkeypatch.setattr("sys.stderr", log)
    assert progress.bar(3, "Working") is None and log.getvalue() == ""


def test_the_environment_overrides_the_terminal_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    monkeypatch.setenv("UPDRAFT_PROGRESS", "1")
    assert progress.interactive() and progress.bar(1, "x") is not None
    monkeypatch.setattr("sys.stderr", _Tty())
    monkeypatch.setenv("UPDRAFT_PROGRESS", "0")
    assert not progress.interactive() and progress.bar(1, "x") is None
    monkeypatch.setenv("UPDRAFT_PROGRESS", "yes")
    with pytest.raises(ValueError, match="UPDRAFT_PROGRESS='yes': expected 1"):
        progress.interactive()

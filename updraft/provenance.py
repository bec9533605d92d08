"""Where a result came from: the git commit of the code that produced it, and the CPU it ran on.

The device machine runs a copy of the working tree without ``.git``: commands sent there set
``UPDRAFT_COMMIT`` (e.g. ``$(git rev-parse --short HEAD)`` here, plus ``-dirty`` when the tree
had uncommitted changes), which wins over asking git.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def git_commit() -> str:
    """Short commit of the code, ``+ uncommitted changes`` when tracked files differ from it;
    ``$UPDRAFT_COMMIT`` when set; ``unknown`` without git."""
    env = os.environ.get("UPDRAFT_COMMIT")
    if env:
        return env
    commit = _git("rev-parse", "--short", "HEAD")
    if not commit:
        return "unknown"
    return commit + (" + uncommitted changes" if _git("status", "--porcelain", "--untracked-files=no") else "")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s; ``platform`` says little on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()

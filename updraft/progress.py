"""Progress bars for people at a terminal, never in logs.

Every bar in updraft comes from ``bar``: it draws on stderr when the caller allows it (the
``progress`` settings: ``--no-progress``, ``LLM.generate(use_tqdm=...)``, the kit's flag) AND
stderr is a terminal. Into a file, a pipe or a service's journal it draws nothing: a bar there is
a line of carriage returns per update. ``UPDRAFT_PROGRESS=1`` draws it anyway (a pipe someone
watches), ``UPDRAFT_PROGRESS=0`` never.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm import tqdm


def interactive() -> bool:
    """Whether a bar allowed by its caller draws (``UPDRAFT_PROGRESS``, else whether stderr is a terminal)."""
    forced = os.environ.get("UPDRAFT_PROGRESS", "")
    if forced in ("0", "1"):
        return forced == "1"
    if forced:
        raise ValueError(f"UPDRAFT_PROGRESS={forced!r}: expected 1 (always draw progress bars) or 0 (never)")
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty is not None and isatty())


def bar(total: int, desc: str, *, enabled: bool = True, **kwargs: object) -> tqdm | None:
    """A tqdm bar on stderr, or None when ``enabled`` is False or bars do not draw here (``interactive``)."""
    if not enabled or not interactive():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, **kwargs)

"""User-facing errors. Each is a ``ValueError`` with a one-line message naming the bad value and
what is allowed; the CLI prints ``error: <message>`` and exits 2, never a traceback."""

from __future__ import annotations


class UpdraftError(ValueError):
    """Base class for errors caused by user input (files, configs, requests)."""


class ModelNotFoundError(UpdraftError):
    """``--model`` names nothing we can load."""


class CheckpointError(UpdraftError):
    """A checkpoint file exists but is corrupt, truncated or inconsistent."""


class RequestError(UpdraftError):
    """A request cannot be served (empty prompt, prompt longer than the context, ...)."""

"""What the speculative worker reads and updates of a request: the runtime's view plus the
request's speculative counters. The engine's ``Request`` satisfies it structurally."""

from __future__ import annotations

from typing import Protocol

from updraft.runtime.request_view import RequestView
from updraft.spec.stats import SpecStats


class SpecRequestView(RequestView, Protocol):
    spec: SpecStats

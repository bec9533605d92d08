"""Options of one server instance (no heavy imports: the CLI builds its flags from here)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# Test-only switch: fault injection through the ``x-updraft-fault`` request header. Off unless
# the server is built with ``enable_fault_injection=True`` (``--enable-fault-injection``) or
# this environment variable is "1".
FAULT_INJECTION_ENV = "UPDRAFT_SERVER_FAULT_INJECTION"
FAULT_HEADER = "x-updraft-fault"
FAULTS = ("forward", "engine_crash")


@dataclass
class ServerSettings:
    """Options of one server instance (``updraft serve`` flags)."""

    served_model_name: str = "default"
    max_queue: int = 1024  # requests waiting for a running slot before 503 + Retry-After
    retry_after_s: int = 1
    log_interval_s: float = 10.0  # periodic stats log line; 0 = off
    enable_fault_injection: bool = field(
        default_factory=lambda: os.environ.get(FAULT_INJECTION_ENV) == "1"
    )

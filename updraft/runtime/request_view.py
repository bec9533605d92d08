"""What the runtime (and the speculative worker on top of it) reads of a request.

The engine's ``Request`` satisfies this structurally; the runtime never imports the engine.
Accessors are O(1) in sequence length except ``tokens``, which copies only the range asked for:
per-iteration host work must not grow with the history.
"""

from __future__ import annotations

from typing import Protocol

import torch

from updraft.sampling_params import SamplingParams


class RequestView(Protocol):
    request_id: str
    prompt_ids: list[int]
    output_ids: list[int]
    params: SamplingParams
    row: int | None  # request-pool row while running
    generator: torch.Generator | None  # a seeded request's own generator (host sampling)
    rng_seed: int  # key of the counter-based RNG used inside graphs

    @property
    def seq_len(self) -> int: ...

    @property
    def last_token(self) -> int: ...

    @property
    def finished(self) -> bool: ...

    def tokens(self, start: int, stop: int) -> list[int]: ...

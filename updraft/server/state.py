"""The per-instance state that handlers share (used on the server loop only)."""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any

from updraft.engine.engine import Engine
from updraft.server.engine_thread import EngineThread
from updraft.server.metrics import ServerMetrics
from updraft.server.settings import ServerSettings


class ServerState:
    """What handlers need: the engine thread, tokenizer, metrics and admission accounting.

    Handlers run on one asyncio loop, so the plain counters here need no lock.
    """

    def __init__(self, engine: Engine, settings: ServerSettings) -> None:
        self.settings = settings
        self.engine_thread = EngineThread(engine)
        self.tokenizer: Any = engine.tokenizer
        self.max_model_len: int = engine.max_model_len
        self.vocab_size: int = engine.model_config.vocab_size
        self.metrics = ServerMetrics(
            lambda: self.engine_thread.snapshot, settings.served_model_name, self.queued
        )
        self.created = int(time.time())
        # Children submitted to the engine thread but not yet acknowledged (Admitted/Rejected).
        self.pending_admission = 0
        self._token_str = lru_cache(maxsize=1 << 16)(self._decode_one)

    def queued(self) -> int:
        """Requests waiting for a running slot: in the engine's queue or not yet admitted."""
        return self.engine_thread.snapshot.num_waiting + self.pending_admission

    def token_str(self, token_id: int) -> str:
        """The text of one token (specials included), for logprobs."""
        return self._token_str(token_id)

    def _decode_one(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

"""Per-request sampling parameters (vLLM-compatible names)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass
class SamplingParams:
    """How to sample one request. ``validate()`` raises ``ValueError`` naming the bad field.

    temperature 0 means greedy. top_k -1 (or 0) disables top-k; top_p 1 disables top-p;
    min_p 0 disables min-p. Penalties follow the OpenAI/vLLM definitions: repetition_penalty
    divides positive (multiplies negative) logits of tokens seen in the prompt or output;
    frequency_penalty subtracts ``count * f`` and presence_penalty subtracts ``p`` for tokens in
    the output.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logprobs: int | None = None  # number of top logprobs to return per token (0 = sampled only)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> SamplingParams:
        def bad(name: str, value: object, allowed: str) -> ValueError:
            return ValueError(f"{name}={value!r} is invalid: {allowed}")

        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("temperature", "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise bad(f.name, value, "must be a number")
                if value != value or value in (float("inf"), float("-inf")):
                    raise bad(f.name, value, "must be finite")
        for name in ("n", "top_k", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(name, value, "must be an integer")
        if self.n < 1:
            raise bad("n", self.n, "must be >= 1")
        if self.temperature < 0:
            raise bad("temperature", self.temperature, "must be >= 0 (0 = greedy)")
        if not 0 < self.top_p <= 1:
            raise bad("top_p", self.top_p, "must be in (0, 1]")
        if self.top_k < -1:
            raise bad("top_k", self.top_k, "must be -1 (disabled), 0 (disabled) or >= 1")
        if not 0 <= self.min_p <= 1:
            raise bad("min_p", self.min_p, "must be in [0, 1]")
        if self.repetition_penalty <= 0:
            raise bad("repetition_penalty", self.repetition_penalty, "must be > 0 (1 = off)")
        if not -2 <= self.frequency_penalty <= 2:
            raise bad("frequency_penalty", self.frequency_penalty, "must be in [-2, 2]")
        if not -2 <= self.presence_penalty <= 2:
            raise bad("presence_penalty", self.presence_penalty, "must be in [-2, 2]")
        if self.max_tokens < 1:
            raise bad("max_tokens", self.max_tokens, "must be >= 1")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise bad("seed", self.seed, "must be an integer or None")
        if self.logprobs is not None and (isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20):
            raise bad("logprobs", self.logprobs, "must be an integer in [0, 20] or None")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise bad("stop", self.stop, "must be non-empty strings")
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", self.stop_token_ids, "must be non-negative integers")
        return self

    @property
    def uses_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0

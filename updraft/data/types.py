"""The training prompt record shared by the prompt generators (``updraft.data.prompts``,
``updraft.data.styles``) and the data pipeline (``updraft.train.data``)."""

from __future__ import annotations

from dataclasses import dataclass

from updraft.data.clean import clean_request

Message = dict[str, str]  # one chat turn: {"role": ..., "content": ...} (the chat template's format)


@dataclass(frozen=True)
class TrainPrompt:
    """One user instruction. ``followup``: a second instruction containing ``{passage}``, to be
    filled with the model's own response to ``text`` (passage and news tasks). ``second_turn``:
    the next user message of the same conversation, after the model's response (advice and
    multi-turn tasks). ``max_tokens``: the first response's length cap when it differs from the
    run's (news articles are longer: the summary's input). ``fallback_request``: marks a
    self-instruct prompt (``text`` asks the model to write a user request): the second stage is
    a NEW conversation whose one user turn is the model's response cleaned by
    ``clean_request``, or this request when nothing usable is left."""

    text: str
    category: str
    followup: str | None = None
    second_turn: str | None = None
    max_tokens: int | None = None
    fallback_request: str | None = None

    @property
    def two_stage(self) -> bool:
        return self.followup is not None or self.second_turn is not None or self.fallback_request is not None

    def fill(self, passage: str) -> str:
        """The second-stage instruction with the model's passage inserted."""
        if self.followup is None:
            raise ValueError(f"{self.category} prompt has no passage follow-up")
        return self.followup.replace("{passage}", passage.strip())

    def request(self, response: str) -> str:
        """The user request of a self-instruct prompt's second stage, given the model's first
        response: the response cleaned, else the fallback (deterministic in both)."""
        if self.fallback_request is None:
            raise ValueError(f"{self.category} prompt is not a self-instruct prompt")
        return clean_request(response, self.text) or self.fallback_request

    def messages(self) -> list[Message]:
        return [{"role": "user", "content": self.text}]

    def stage2_messages(self, response: str) -> list[Message]:
        """The conversation of the second stage, given the model's first response."""
        if self.followup is not None:
            return [{"role": "user", "content": self.fill(response)}]
        if self.fallback_request is not None:
            return [{"role": "user", "content": self.request(response)}]
        if self.second_turn is None:
            raise ValueError(f"{self.category} prompt is single-stage")
        return [*self.messages(), {"role": "assistant", "content": response.strip()}, {"role": "user", "content": self.second_turn}]

"""The training prompt record shared by the prompt generators (``updraft.data.prompts``,
``updraft.data.styles``) and the data pipeline (``updraft.train.data``)."""

from __future__ import annotations

from dataclasses import dataclass

Message = dict[str, str]  # one chat turn: {"role": ..., "content": ...} (the chat template's format)


@dataclass(frozen=True)
class TrainPrompt:
    """One user instruction. ``followup``: a second instruction containing ``{passage}``, to be
    filled with the model's own response to ``text`` (passage and news tasks). ``second_turn``:
    the next user message of the same conversation, after the model's response (advice and
    multi-turn tasks). ``max_tokens``: the first response's length cap when it differs from the
    run's (news articles are longer: the summary's input)."""

    text: str
    category: str
    followup: str | None = None
    second_turn: str | None = None
    max_tokens: int | None = None

    @property
    def two_stage(self) -> bool:
        return self.followup is not None or self.second_turn is not None

    def fill(self, passage: str) -> str:
        """The second-stage instruction with the model's passage inserted."""
        if self.followup is None:
            raise ValueError(f"{self.category} prompt has no passage follow-up")
        return self.followup.replace("{passage}", passage.strip())

    def messages(self) -> list[Message]:
        return [{"role": "user", "content": self.text}]

    def stage2_messages(self, response: str) -> list[Message]:
        """The conversation of the second stage, given the model's first response."""
        if self.followup is not None:
            return [{"role": "user", "content": self.fill(response)}]
        if self.second_turn is None:
            raise ValueError(f"{self.category} prompt is single-stage")
        return [*self.messages(), {"role": "assistant", "content": response.strip()}, {"role": "user", "content": self.second_turn}]

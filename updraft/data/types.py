"""The training prompt record shared by the prompt generators (``updraft.data.prompts``,
``updraft.data.styles``) and the data pipeline (``updraft.train.data``)."""

from __future__ import annotations

from dataclasses import dataclass

from updraft.data.clean import clean_request, clean_user_turn

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
    ``clean_request``, or this request when nothing usable is left. ``open_turn``: a free-turn
    prompt (with ``fallback_request``): stage 1 is not an instruction but the user's own turn,
    left open after ``text`` (an opener, maybe empty) for the target to continue as the user;
    the second stage is a NEW conversation whose one user turn is ``text`` + that continuation,
    cleaned by ``clean_user_turn``, or the fallback. Stage 1 of a free turn is the user's side,
    which a head never drafts: it is not a training sequence (``trains_stage1``)."""

    text: str
    category: str
    followup: str | None = None
    second_turn: str | None = None
    max_tokens: int | None = None
    fallback_request: str | None = None
    open_turn: bool = False

    def __post_init__(self) -> None:
        if self.open_turn and self.fallback_request is None:
            raise ValueError(f"{self.category} prompt: an open user turn needs a fallback request")

    @property
    def two_stage(self) -> bool:
        return self.followup is not None or self.second_turn is not None or self.fallback_request is not None

    @property
    def trains_stage1(self) -> bool:
        return not self.open_turn

    @property
    def eval_request(self) -> str:
        """The one user message a held-out evaluation sends for this prompt: ``text``, or a free
        turn's fallback (its own request exists only once the target has sampled it)."""
        return self.fallback_request if self.open_turn and self.fallback_request is not None else self.text

    def fill(self, passage: str) -> str:
        """The second-stage instruction with the model's passage inserted."""
        if self.followup is None:
            raise ValueError(f"{self.category} prompt has no passage follow-up")
        return self.followup.replace("{passage}", passage.strip())

    def request(self, response: str, complete: bool = True) -> str:
        """The user request of a self-instruct or free-turn prompt's second stage, given the
        model's first response (``complete``: it ended by itself, not at its token cap): the
        response cleaned, else the fallback (deterministic in both)."""
        if self.fallback_request is None:
            raise ValueError(f"{self.category} prompt is not a self-instruct prompt")
        if self.open_turn:
            return clean_user_turn(self.text + response, complete) or self.fallback_request
        return clean_request(response, self.text) or self.fallback_request

    def messages(self) -> list[Message]:
        return [{"role": "user", "content": self.text}]

    def stage2_messages(self, response: str, complete: bool = True) -> list[Message]:
        """The conversation of the second stage, given the model's first response."""
        if self.followup is not None:
            return [{"role": "user", "content": self.fill(response)}]
        if self.fallback_request is not None:
            return [{"role": "user", "content": self.request(response, complete)}]
        if self.second_turn is None:
            raise ValueError(f"{self.category} prompt is single-stage")
        return [*self.messages(), {"role": "assistant", "content": response.strip()}, {"role": "user", "content": self.second_turn}]

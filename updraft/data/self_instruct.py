"""``self_instruct`` prompts (prompt set v4): the target writes the user request itself.

Templated prompts phrase every request the way our templates do; real users (the chat
benchmarks' open-ended writing, role play, reasoning, extraction and STEM / humanities
questions) write in many more styles. So stage 1 asks the target for ONE realistic message a
user might send to an AI assistant, drawn from task kind x subject x user x tone x format
constraint (``TASK_KINDS``, ``USERS``, ``TONES``, ``CONSTRAINTS`` and the word lists of
``material`` / ``facts``), and stage 2 sends that message, cleaned by
``updraft.data.clean.clean_request``, as the only user turn of a NEW conversation: the target's
answer to it is the training sequence, as for any prompt of ours.

Each prompt carries a deterministic fallback request (``TrainPrompt.fallback_request``), a
templated request of the same kind and subject, used when the cleaned stage-1 text is unusable
(empty, too short, junk, a refusal, an echo of the instruction): stage 2 always exists, and
depends only on the seed and the target's stage-1 text.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from updraft.data import facts as f
from updraft.data import material as m
from updraft.data import styles
from updraft.data.types import TrainPrompt

CATEGORY = "self_instruct"


@dataclass(frozen=True)
class TaskKind:
    """One kind of request. ``describe`` (with ``{s}``) says what the target should write;
    ``subject`` draws ``{s}``; ``fallback`` builds the templated request from ``(r, s)``."""

    describe: str
    subject: Callable[[random.Random], str]
    fallback: Callable[[random.Random, str], str]


def _topic(r: random.Random) -> str:
    return r.choice(m.TOPICS)


def _concept(r: random.Random, fields: tuple[str, ...] = ("science", "technology", "health")) -> str:
    return r.choice(m.CONCEPTS[r.choice(fields)])


#: Topics without " and " (a pair of them reads as one: "X and Y and Z").
_SINGLE_TOPICS = [t for t in m.TOPICS if " and " not in t]


def _pair(r: random.Random) -> str:
    pool = r.choice([_SINGLE_TOPICS, m.LANGUAGES, m.CONCEPTS["technology"], f.COUNTRIES, m.WRITING_FORMS])
    a, b = r.sample(pool, 2)
    return f"{a} and {b}"


def _names(r: random.Random) -> str:
    a, b, c = r.sample(m.NAMES, 3)
    return f"{a}, {b} and {c}"


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


#: Emails and letters people ask for ("Write a short email {s}.").
EMAIL_PURPOSES = [
    "asking my manager for a deadline extension", "complaining about a late delivery", "thanking a former teacher",
    "declining a job offer politely", "inviting my neighbors to a street party", "asking my landlord to fix the heating",
    "resigning from my job", "requesting a refund for a broken product", "introducing myself to my new team",
    "following up after a job interview", "apologizing to a friend for missing their birthday",
    "asking a professor for a recommendation letter", "reminding a client about an unpaid invoice",
    "welcoming new members to our book club",
]

#: Task kinds, as the chat benchmarks mix them: writing, role play, reasoning, math, coding,
#: extraction, STEM and humanities questions, plus advice, email, planning and opinion requests.
TASK_KINDS = [
    TaskKind("a creative writing request (a story, poem, song or scene) about {s}", _topic,
             lambda r, s: f"Write a short story about {s}."),
    TaskKind("a question comparing {s}", _pair,
             lambda r, s: f"What are the main differences between {s}, and which would you recommend?"),
    TaskKind("a request for the assistant to role-play {s}", lambda r: r.choice(m.PERSONAS),
             lambda r, s: f"Pretend you are {s}. Stay in character and tell me about your day."),
    TaskKind("a step-by-step reasoning puzzle (logic, ordering or scheduling) involving {s}", _names,
             lambda r, s: f"{s} share 24 cookies so that each gets two more than the one before. How many does each get? Explain step by step."),
    TaskKind("a request to extract specific facts from a short text about {s} that the user pastes into the message "
             "(write the text too)", _topic, lambda r, s: styles.extraction(r).text),
    TaskKind("a request to write an email or letter {s}", lambda r: r.choice(EMAIL_PURPOSES),
             lambda r, s: f"Write a short email {s}."),
    TaskKind("a request for advice about a personal situation: {s}", lambda r: r.choice(m.SITUATIONS),
             lambda r, s: f"{_cap(s)}. What should I do?"),
    TaskKind("a question about a historical event: {s}", lambda r: r.choice(f.HISTORY_EVENTS),
             lambda r, s: f"What led to {s}, and why does it still matter today?"),
    TaskKind("a science or technology question about {s}", _concept,
             lambda r, s: f"Can you explain {s} in simple terms?"),
    TaskKind("a question or essay request about {s}", lambda r: r.choice(m.ESSAY_SUBJECTS),
             lambda r, s: f"Write a short essay on {s}."),
    TaskKind("a programming question or request about writing a {s}",
             lambda r: f"{r.choice(m.LANGUAGES)} function that {r.choice(m.CODE_TASKS)}",
             lambda r, s: f"How do I write a {s}? Please show the code."),
    TaskKind("a request to proofread, rewrite or shorten a paragraph about {s} that the user pastes into the message "
             "(write the paragraph too)", _topic,
             lambda r, s: (f"Can you fix the grammar in this paragraph? 'Me and my friends has been reading about {s} "
                           "for weeks and we thinks it are very interesting, but we doesn't understand everything yet.'")),
    TaskKind("a request for ideas, names or recommendations related to {s}", _topic,
             lambda r, s: f"Give me ten creative ideas related to {s}."),
    TaskKind("a request to plan a trip, an event or a schedule in {s}", lambda r: r.choice(f.COUNTRIES + f.CITIES),
             lambda r, s: f"Help me plan a three-day trip to {s}. What should I do each day?"),
    TaskKind("a question asking for the assistant's opinion on {s}", _topic,
             lambda r, s: f"What is your honest opinion of {s}? Give arguments on both sides."),
    TaskKind("a math word problem about {s} for the assistant to solve", _topic,
             lambda r, s: (f"A club about {s} has 24 members. A third of them bring two friends each to a meeting. "
                           "How many people attend? Show your steps.")),
    TaskKind("a factual question about {s}", lambda r: r.choice(f.COUNTRIES + f.PEOPLE_FAMOUS + f.LANDMARKS),
             lambda r, s: f"Tell me some interesting facts about {s}."),
    TaskKind("a request to explain {s} to a particular audience (a child, a beginner, a grandparent ...)",
             lambda r: _concept(r, ("economics", "humanities", "technology")),
             lambda r, s: f"Explain {s} as if I were ten years old."),
]

#: Who writes the request.
USERS = [*m.AUDIENCES, "a busy parent", "a retired engineer", "a small-business owner", "a nurse on night shifts",
         "a non-native English speaker", "a novelist with writer's block", "a job seeker", "a hobby gardener",
         "a history enthusiast", "a new team lead", "a freelance designer", "a high school teacher", "a gamer"]

#: How the request is phrased.
TONES = [
    "casually, all in lower case, the way people type in a hurry", "politely, with a sentence of background first",
    "as one short, direct sentence", "in simple English with a small grammar mistake", "in a friendly, chatty tone",
    "formally, like a work message", "with some detail about what they need and why", "starting with a short greeting",
    "a bit impatiently", "enthusiastically", "as a question", "as an instruction",
]

#: Format or length constraints the request itself should state (often none).
CONSTRAINTS = [
    "", "", "", "", " The request should ask for a bulleted list.", " The request should ask for an answer under 100 words.",
    " The request should ask for numbered steps.", " The request should ask for a table.",
    " The request should ask for a particular tone (funny, formal, encouraging ...).",
    " The request should set a word limit.", " The request should ask for a few options to choose from.",
    " The request should ask for an example.",
]


# Showing example user messages in the instruction made SmolLM2-135M fall back more often (20 of
# 24 greedy stage-1 outputs unusable vs 16 without, CPU sample): it copies them or answers them.
def _instruction(r: random.Random, user: str, desc: str, tone: str, constraint: str) -> str:
    templates = [
        f"Write one realistic message that {user} might send to an AI assistant: {desc}. Phrase it {tone}.{constraint} "
        "Write as the user, not as the assistant, and reply with the message only: no introduction, no quotes, "
        "and do not answer it.",
        f"Imagine you are {user} asking an AI assistant for help. Write the message you would send: {desc}. "
        f"Write it {tone}.{constraint} Output only that message.",
        f"Invent {desc}, as {user} would type it into a chatbot. Style: {tone}.{constraint} "
        "Give only the user's request itself, without answering it.",
    ]
    return r.choice(templates)


def self_instruct(r: random.Random) -> TrainPrompt:
    """Stage 1: ask the target for a user request; stage 2 (``TrainPrompt.stage2_messages``):
    that request, cleaned, or the fallback, as a new conversation."""
    kind = r.choice(TASK_KINDS)
    s = kind.subject(r)
    user, tone, constraint = r.choice(USERS), r.choice(TONES), r.choice(CONSTRAINTS)
    text = _instruction(r, user, kind.describe.replace("{s}", s), tone, constraint)
    return TrainPrompt(text, CATEGORY, fallback_request=kind.fallback(r, s))

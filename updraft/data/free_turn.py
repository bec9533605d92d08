"""``free_turn`` prompts (prompt set v6): the target writes the user's turn as the user.

Every other category phrases the request itself (templates) or asks the target for one
(``self_instruct``: "write a request a student might send"); both produce the requests WE
imagine. An instruct model has also learned what users send it: rendered up to an open user
turn (the chat template's system prompt and user header, then nothing or a short opener) and
sampled at ``TEMPERATURE``, it continues with a user message from its own chat distribution:
requests, questions, pasted drafts, role-play set-ups, in the mix and style of the
conversations it was tuned on. (Aligned-model query synthesis of this kind is known as
"Magpie"; here it only picks the prompts, the answers stay the target's.)

Stage 1 is that continuation (not a training sequence: the head never drafts the user's side);
stage 2 is a NEW conversation whose one user turn is the opener + continuation, cleaned by
``updraft.data.clean.clean_user_turn``, or a templated fallback request when nothing usable is
left. The continuation depends only on the run's seed and the prompt's index (its sampling
seed), so the data stays reproducible from its seed.

On the CPU (fp32, the shipped head, 24 prompts each, greedy S = 5): the head accepted 2.47 tokens
per verify step on the answers to such turns, 2.51 on mt_bench's, against 3.0+ on our templated
prompts: the target's own user turns sit where the evaluation's prompts do, outside what the
head was trained on.
"""

from __future__ import annotations

import random

from updraft.data import styles
from updraft.data.types import TrainPrompt

CATEGORY = "free_turn"
#: Stage 1's sampling: the target's own distribution of user turns (top-p trims its junk tail).
TEMPERATURE = 1.0
TOP_P = 0.95
#: Stage 1's token cap (a user turn; ``clean_user_turn`` drops a sentence it left unfinished).
MAX_TOKENS = 200
#: The share of free turns that open with nothing: the model alone decides what the user wants.
EMPTY_SHARE = 0.4
#: Openers for the rest: first words that lean the turn toward a kind of task (writing, role
#: play, reasoning, math, code, extraction, explanations, advice) without choosing its subject.
OPENERS = (
    "Write", "Can you write", "Compose", "Draft", "I need to write", "Rewrite", "Edit", "Help me write",
    "Imagine", "Pretend", "Act as", "Let's play", "You are",
    "Why", "How", "What", "Is it true that", "Explain", "Describe", "Compare",
    "Solve", "Calculate", "If", "A", "Prove",
    "Write a Python", "Write a function", "How do I", "I have this code", "Implement",
    "Extract", "Summarize", "Here is", "Read the following", "Given",
    "I'm", "My", "I've been", "We are", "Our team",
    "Can you", "Could you", "Please", "Give me", "Suggest", "List",
)


def free_turn(r: random.Random) -> TrainPrompt:
    """A free-turn prompt: ``text`` is the opener the user's turn starts with (maybe empty); the
    fallback is a templated instruction or question."""
    opener = "" if r.random() < EMPTY_SHARE else r.choice(OPENERS)
    fallback = (styles.instruct(r) if r.random() < 0.5 else styles.factual(r)).text
    return TrainPrompt(opener, CATEGORY, fallback_request=fallback, open_turn=True)

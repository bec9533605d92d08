"""Prompt sets: v3 is frozen (the shipped head's recipe must reproduce from a fresh checkout);
v4 adds ``self_instruct`` prompts, whose second stage is the target's own request, cleaned; v5
adds ``brief`` prompts (tests/data/test_briefs.py)."""

from __future__ import annotations

import hashlib
import json

import pytest

from updraft.data.clean import MAX_CHARS, clean_request
from updraft.data.material import TOPICS
from updraft.data.prompts import PROMPT_SETS, WEIGHTS, WEIGHTS_V4, build_prompts, prompts_version
from updraft.data.types import TrainPrompt

#: sha256 of build_prompts(n, seed) (every field) before prompt sets existed (commit 20ecdc5).
V3_HASHES = {
    (500, 0): "686d4143ba63aa976b87162e6f10adcbc9e58f7aa88b4767c71b781e9636ab74",
    (40, 0): "dfe018d0fee06ecb9de18d893dbb5fcc719197af7837f506aee72db700263aff",
    (2000, 5): "6e33a1992944298437f03816c76fcc48e4e48b8677b44874263e3ecb6358c741",
}


def _digest(prompts: list[TrainPrompt]) -> str:
    blob = json.dumps([[p.text, p.category, p.followup, p.second_turn, p.max_tokens] for p in prompts])
    return hashlib.sha256(blob.encode()).hexdigest()


@pytest.mark.parametrize(("n", "seed"), sorted(V3_HASHES))
def test_v3_is_unchanged_byte_for_byte(n: int, seed: int) -> None:
    assert _digest(build_prompts(n, seed)) == V3_HASHES[(n, seed)]
    v3 = build_prompts(n, seed, "v3")
    assert _digest(v3) == V3_HASHES[(n, seed)]
    assert all(p.fallback_request is None for p in v3)


def test_prompt_set_names_and_versions() -> None:
    assert PROMPT_SETS == ("v3", "v4", "v5")
    assert prompts_version("v3") == 3 and prompts_version("v4") == 4 and prompts_version("v5") == 5
    with pytest.raises(ValueError, match=r"prompt_set='v6' is invalid: choose one of v3, v4, v5"):
        build_prompts(10, 0, "v6")
    with pytest.raises(ValueError, match="v3, v4, v5"):
        prompts_version("V4")


def test_v4_adds_a_third_of_self_instruct_prompts() -> None:
    assert WEIGHTS_V4 == WEIGHTS | {"self_instruct": WEIGHTS_V4["self_instruct"]}
    assert WEIGHTS_V4["self_instruct"] * 3 == sum(WEIGHTS_V4.values())
    pool = build_prompts(1500, 3, "v4")
    assert pool == build_prompts(1500, 3, "v4") and pool != build_prompts(1500, 4, "v4")
    assert len({p.text for p in pool}) == 1500
    si = [p for p in pool if p.category == "self_instruct"]
    assert 0.28 < len(si) / len(pool) < 0.39
    assert {p.category for p in pool} == set(WEIGHTS_V4)
    for p in si:
        assert p.two_stage and p.followup is None and p.second_turn is None and p.max_tokens is None
        assert p.fallback_request and len(p.fallback_request.split()) >= 4
        assert "AI assistant" in p.text or "chatbot" in p.text
    assert len({p.text.split(":")[0] for p in si}) > 50  # users x templates, not one phrasing
    assert all(p.fallback_request is None for p in pool if p.category != "self_instruct")


def test_self_instruct_second_stage_is_a_new_conversation() -> None:
    p = next(p for p in build_prompts(200, 0, "v4") if p.category == "self_instruct")
    own = 'Sure! Here is a request:\n\n"Can you explain how tides work, in three sentences?"\n\nThis is realistic because...'
    assert p.stage2_messages(own) == [{"role": "user", "content": "Can you explain how tides work, in three sentences?"}]
    for junk in ("", "  ", "Request:", "ok", "%%% 123 ### 456", p.text):
        assert p.stage2_messages(junk) == [{"role": "user", "content": p.fallback_request}]
    with pytest.raises(ValueError, match="not a self-instruct"):
        TrainPrompt("x", "qa").request("y")


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ('"What is the best way to learn chess openings?"', "What is the best way to learn chess openings?"),
        ("\u201cCould you recommend three books about Rome?\u201d", "Could you recommend three books about Rome?"),
        ('"Can you list five tips for marathon training', "Can you list five tips for marathon training"),  # cut off
        ("**Request:** Write me a poem about cats, please.", "Write me a poem about cats, please."),
        ("User: what is the difference between Python and Go\nAssistant: Python is ...",
         "what is the difference between Python and Go"),
        ("Here's one:\nhey can u help me plan a bday party for my 8yo", "hey can u help me plan a bday party for my 8yo"),
        ("```\nCan you write a haiku about autumn leaves?\n```", "Can you write a haiku about autumn leaves?"),
        ("Okay so I need help planning a trip to Japan next spring", "Okay so I need help planning a trip to Japan next spring"),
        ('Proofread this: "Me and him goes to school every days."', 'Proofread this: "Me and him goes to school every days."'),
        ("Extract the names and dates from this text:\n\nMaya met Omar in Paris on 3 May.\n\nThanks so much!",
         "Extract the names and dates from this text:\n\nMaya met Omar in Paris on 3 May."),
        ("Write a limerick about a cat.\n\nResponse: There once was a cat ...", "Write a limerick about a cat."),
        ('A student might send a message to an AI assistant, "Hey AI, can you explain tides to me?"',
         "Hey AI, can you explain tides to me?"),
        ("What a fun task! Here's a factual question about Canada:\n\nWhat is the capital of Canada?",
         "What is the capital of Canada?"),
        ("Dear AI,\n\nI need a letter declining a job offer politely.\n\nBest, Sam",
         "Dear AI,\n\nI need a letter declining a job offer politely."),
    ],
)
def test_clean_request_keeps_the_request(raw: str, want: str) -> None:
    assert clean_request(raw) == want


@pytest.mark.parametrize(
    "raw",
    ["", "   \n ", '""', "Request:", "Hi there", "12 34 56 78 %%% ###", "As an AI, I cannot write requests for you.",
     "the the the " * 20, "I'm here to help you with your homework. What's your question?",
     "I'm a helpful AI assistant named SmolLM, and I can help with anything."],
)
def test_clean_request_drops_the_unusable(raw: str) -> None:
    assert clean_request(raw) is None


def test_clean_request_echo_and_length_cap() -> None:
    instruction = "Write one realistic message that a nurse might send to an AI assistant: a question about sleep."
    assert clean_request("Write one realistic message that a nurse might send", instruction) is None
    long = " ".join(f"Tell me about {t}." for t in TOPICS)
    out = clean_request(long)
    assert out is not None and len(out) <= MAX_CHARS and out.endswith(".")
    words = " ".join(f"word{i}" for i in range(600))  # no sentence end: cut at a space
    out = clean_request(words)
    assert out is not None and len(out) <= MAX_CHARS and words.startswith(out) and not out.endswith(" ")

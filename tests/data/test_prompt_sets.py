"""Prompt sets: v3 is frozen (the shipped head's recipe must reproduce from a fresh checkout);
v4 adds ``self_instruct`` prompts, whose second stage is the target's own request, cleaned; v5
adds ``brief`` prompts (tests/data/test_briefs.py); v6 adds ``free_turn`` prompts, whose first stage is
an open user turn the target continues as the user."""

from __future__ import annotations

import hashlib
import json

import pytest

from updraft.data import free_turn
from updraft.data.clean import MAX_CHARS, clean_request, clean_user_turn
from updraft.data.material import TOPICS
from updraft.data.prompts import (
    PROMPT_SETS,
    WEIGHTS,
    WEIGHTS_V4,
    WEIGHTS_V5,
    WEIGHTS_V6,
    build_prompts,
    prompts_version,
)
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
    assert PROMPT_SETS == ("v3", "v4", "v5", "v6")
    assert [prompts_version(v) for v in PROMPT_SETS] == [3, 4, 5, 6]
    with pytest.raises(ValueError, match=r"prompt_set='v7' is invalid: choose one of v3, v4, v5, v6"):
        build_prompts(10, 0, "v7")
    with pytest.raises(ValueError, match="v3, v4, v5, v6"):
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


def test_v6_adds_half_free_turns() -> None:
    assert WEIGHTS_V6 == WEIGHTS_V5 | {"free_turn": sum(WEIGHTS_V5.values())}
    pool = build_prompts(2000, 3, "v6")
    assert pool == build_prompts(2000, 3, "v6") and pool != build_prompts(2000, 4, "v6")
    ft = [p for p in pool if p.category == "free_turn"]
    assert 0.45 < len(ft) / len(pool) < 0.55
    assert {p.category for p in pool} == set(WEIGHTS_V6)
    others = [p for p in pool if p.category != "free_turn"]
    assert len({p.text for p in others}) == len(others)  # the templated ones stay distinct
    empty = sum(p.text == "" for p in ft) / len(ft)
    assert abs(empty - free_turn.EMPTY_SHARE) < 0.06
    assert {p.text for p in ft} == {""} | set(free_turn.OPENERS)
    for p in ft:
        assert p.open_turn and p.two_stage and not p.trains_stage1 and p.followup is None and p.second_turn is None
        assert p.fallback_request and len(p.fallback_request.split()) >= 3 and p.eval_request == p.fallback_request
    assert not any(p.open_turn for p in others) and all(p.trains_stage1 and p.eval_request == p.text for p in others)
    with pytest.raises(ValueError, match="needs a fallback request"):
        TrainPrompt("Write", "free_turn", open_turn=True)


def test_free_turn_second_stage_is_the_opener_and_the_targets_words() -> None:
    p = TrainPrompt("Write", "free_turn", fallback_request="Explain how tides work.", open_turn=True)
    assert p.stage2_messages(" a short poem about the sea for my daughter's birthday card.") == [
        {"role": "user", "content": "Write a short poem about the sea for my daughter's birthday card."}]
    # cut by its token cap: the unfinished sentence goes
    cut = " a toast for my sister's wedding. She loves hiking and old films, and we grew up"
    assert p.stage2_messages(cut, complete=False) == [{"role": "user", "content": "Write a toast for my sister's wedding."}]
    for junk in ("", " !!", " me", " the the the" * 20):
        assert p.stage2_messages(junk) == [{"role": "user", "content": "Explain how tides work."}]
    assert p.stage2_messages(" a poem and keep going forever", complete=False)[0]["content"] == "Explain how tides work."


@pytest.mark.parametrize(
    ("raw", "complete", "want"),
    [
        ("  How do I center a div?\n", True, "How do I center a div?"),
        # paragraphs stay: a user pastes the text to work on
        ("Summarize this for me:\n\nThe council met on Monday.\n\nIt voted to fix the bridge.", True,
         "Summarize this for me:\n\nThe council met on Monday.\n\nIt voted to fix the bridge."),
        ("What is a prime number?\nAssistant: A prime number is ...", True, "What is a prime number?"),
        ("Explain recursion with an example. Then give me a", False, "Explain recursion with an example."),
        ("Fix my code:\n\ndef f(x):\n    return x+", False, None),  # no sentence ends: nothing usable
    ],
)
def test_clean_user_turn(raw: str, complete: bool, want: str | None) -> None:
    assert clean_user_turn(raw, complete) == want


def test_clean_user_turn_drops_the_unusable() -> None:
    for raw in ("", "Hi", "%%% ### 123 456 789", "I'm here to help you with anything. What's your question?",
                "as an AI I cannot", "Tell me a story about a dragon and"):
        assert clean_user_turn(raw, complete=raw != "Tell me a story about a dragon and") is None
    assert len(clean_user_turn(" ".join(f"Tell me about {t}." for t in TOPICS)) or "") <= MAX_CHARS

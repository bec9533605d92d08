"""Prompt set v5: v3 plus ``brief`` prompts (``updraft.data.briefs``), long first-turn requests
with a framing, a task and constraints, at 40% of the prompts."""

from __future__ import annotations

import hashlib
import json
import random
import re
import statistics

import pytest

from updraft.data import briefs
from updraft.data.brief_base import VALUES, a_, fill
from updraft.data.prompts import (
    WEIGHTS,
    WEIGHTS_V5,
    build_prompts,
    check_prompt_set,
    prompts_version,
)
from updraft.data.types import TrainPrompt

#: sha256 of build_prompts(300, 0, "v5") (every field): the set's output is frozen from here on,
#: like v3's; a change to the brief generators goes into a new set.
V5_HASH = "559d43243bde7d5f5173205ec955b830c5027ddbd64481ba2366f2bd85928dac"
_PLACEHOLDER = re.compile(r"\{[A-Za-z0-9_]*\}")


def _digest(prompts: list[TrainPrompt]) -> str:
    blob = json.dumps([[p.text, p.category, p.followup, p.second_turn, p.max_tokens] for p in prompts])
    return hashlib.sha256(blob.encode()).hexdigest()


@pytest.fixture(scope="module")
def drawn() -> list[str]:
    r = random.Random(11)
    return [briefs.brief(r).text for _ in range(3000)]


def test_v5_is_registered_and_pinned() -> None:
    assert check_prompt_set("v5") == "v5" and prompts_version("v5") == 5
    assert _digest(build_prompts(300, 0, "v5")) == V5_HASH


def test_v5_is_deterministic_and_seeded() -> None:
    pool = build_prompts(1500, 3, "v5")
    assert pool == build_prompts(1500, 3, "v5")
    other = build_prompts(1500, 4, "v5")
    assert pool != other and len({p.text for p in pool} & {p.text for p in other}) < 300  # short templates may repeat
    assert len({p.text for p in pool}) == 1500
    assert {p.category for p in pool} == set(WEIGHTS_V5)


def test_v5_is_v3_plus_two_fifths_briefs() -> None:
    assert WEIGHTS_V5 == WEIGHTS | {"brief": WEIGHTS_V5["brief"]}
    assert abs(WEIGHTS_V5["brief"] / sum(WEIGHTS_V5.values()) - 0.4) < 0.005
    pool = build_prompts(3000, 0, "v5")
    br = [p for p in pool if p.category == "brief"]
    assert 0.36 < len(br) / len(pool) < 0.46  # ~0.41: duplicates of short templates are redrawn
    for p in br:  # single-stage
        assert not p.two_stage and p.followup is None and p.second_turn is None and p.max_tokens is None
        assert p.fallback_request is None


def test_brief_texts_are_clean(drawn: list[str]) -> None:
    for t in drawn:
        assert t.strip() == t and t, t
        assert not _PLACEHOLDER.search(t), t
        assert "  " not in t and " ." not in t and " ," not in t and ".." not in t, t
        assert not re.search(r"\ban [bcdfgjklmnpqrstvwz]|\ba (?:[ai]|e(?!u)|o(?!ne))", t), t  # a / an


def test_brief_texts_are_long_and_distinct(drawn: list[str]) -> None:
    words = [len(t.split()) for t in drawn]
    assert min(words) >= 8 and max(words) <= 170
    assert 45 <= statistics.median(words) <= 75
    assert sum(40 <= w <= 120 for w in words) >= 0.75 * len(words)
    assert len(set(drawn)) >= 0.95 * len(drawn)
    assert len({" ".join(t.split()[:3]) for t in drawn}) > 300  # many openings, not one template
    assert sum(len(re.findall(r"[.?!](?:\s|$)", t)) >= 2 for t in drawn) >= 0.9 * len(drawn)  # several sentences


def test_every_domain_and_kind_has_fitting_constraints() -> None:
    r = random.Random(5)
    kinds = set()
    for gen, weight in briefs.DOMAINS:
        assert weight > 0
        for _ in range(30):
            d = gen(r)
            kinds.add(d.kind)
            assert d.task and not _PLACEHOLDER.search(d.frame + d.task + d.head + d.tail)
            assert not (d.head and d.tail)
    for kind in kinds:
        slots = {slot for slot, fits, _ in briefs.CONSTRAINTS if kind in fits}
        assert len(slots) >= 4, kind
        got = briefs.constraints(r, kind, 4)
        assert len(got) == 4 and len(set(got)) == 4 and not any(_PLACEHOLDER.search(c) for c in got)


def test_constraints_take_one_per_slot() -> None:
    patterns = [(slot, re.compile(_PLACEHOLDER.sub(".+", re.escape(p).replace(r"\{", "{").replace(r"\}", "}")) + "$"))
                for slot, _, phrasings in briefs.CONSTRAINTS for p in phrasings]
    r = random.Random(0)
    for kind in "nmcl":
        for _ in range(100):
            got = briefs.constraints(r, kind, 4)
            slots = [next(slot for slot, pat in patterns if pat.match(c)) for c in got]
            assert len(slots) == len(set(slots)) == 4, got
        assert len(briefs.constraints(r, kind, 1)) == 1


def test_fill_keeps_repeats_and_separates_numbered_keys() -> None:
    r = random.Random(3)
    for _ in range(50):
        out = fill(r, "{name} met {name2}; {name} left.")
        a, rest = out.split(" met ")
        b, c = rest.rstrip(".").split("; ")
        assert c == f"{a} left" and a != b
    with pytest.raises(KeyError):
        fill(r, "{nope}")
    assert {"name", "topic", "words"} <= set(VALUES)
    assert a_("opinion piece") == "an opinion piece" and a_("short story") == "a short story"

"""Shared pieces of the ``brief`` prompts (``updraft.data.briefs``): the ``Draft`` a task
generator returns, the ``{placeholder}`` filler, the ways a user phrases a request, the
optional "who I am" framing, and the word lists several generators use.

Written for updraft: nothing comes from a dataset, and no evaluation set is read. Every list's
order is part of set v5's contract (``updraft.data.prompts``): change none of them, add to new
names for a new set.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from updraft.data import facts as f
from updraft.data import material as m


@dataclass(frozen=True)
class Draft:
    """One request before its constraints: ``frame`` (who the user is, what for; may be empty),
    ``task`` (what to do, one or more sentences), ``kind`` (which constraints fit: the letters
    of ``briefs.CONSTRAINTS``), ``tail`` (a text the user pastes, placed after the request;
    may be empty) and ``head`` (a text placed BEFORE the request instead; may be empty)."""

    frame: str
    task: str
    kind: str
    tail: str = ""
    head: str = ""


WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
SURNAMES = ["Hale", "Moreno", "Okafor", "Lindqvist", "Tanaka", "Petrov", "Novak", "Castillo", "Brennan",
            "Haddad", "Kowalski", "Mensah", "Ferreira", "Nakamura", "Osei", "Larsen", "Dubois", "Iyer"]
#: Real cities (``facts.CITIES`` are made-up towns, used where the text invents an event).
CITIES = ["Lisbon", "Kyoto", "Mexico City", "Edinburgh", "Vancouver", "Istanbul", "Cape Town", "Buenos Aires",
          "Seoul", "Prague", "Marrakesh", "Melbourne", "Copenhagen", "Hanoi", "Rome", "Montreal", "Nairobi",
          "Vienna", "Lima", "Barcelona"]
#: Who the user is ("I'm {role}").
ROLES = [
    "a high school biology teacher", "a nurse on a busy surgical ward", "a product manager at a small startup",
    "a first-year university student", "a retired accountant", "a freelance graphic designer",
    "a volunteer at an animal shelter", "the owner of a small bakery", "a parent of two young kids",
    "a junior data analyst", "a community college instructor", "a marketing coordinator at a nonprofit",
    "a civil engineer", "a PhD student in ecology", "a librarian at a public library", "a personal trainer",
    "a hotel receptionist", "a reporter at a small-town newspaper", "a middle school math tutor",
    "a software engineer who just switched teams", "an HR manager at a furniture factory", "a travel blogger",
    "a physical therapist", "a restaurant manager", "a piano teacher", "a city council staffer",
    "a real estate agent", "an exchange student from Brazil", "a night-shift security guard",
    "a stay-at-home dad", "a wedding photographer", "a second-year law student",
]
#: Readers of a blog or newsletter (plural).
READERS = ["busy parents", "retirees", "college students", "small-business owners", "complete beginners",
           "people who just moved to the city", "software developers", "teachers", "outdoor lovers", "nurses",
           "first-time home buyers", "high school students", "remote workers", "people over sixty"]
TONES = ["warm but professional", "friendly and upbeat", "calm and reassuring", "confident without being pushy",
         "light and a little funny", "serious and respectful", "plain and direct", "warm and encouraging",
         "polite but firm", "casual, like a message to a friend"]
MOODS = ["hopeful rather than sad", "gentle and a little funny", "quiet and reflective", "playful", "bittersweet",
         "tense until the very end", "cozy"]
JOBS = ["junior data analyst", "barista", "research assistant", "customer support specialist",
        "primary school teacher", "junior web developer", "warehouse team lead", "marketing intern",
        "library assistant", "pediatric nurse", "project coordinator", "sous chef", "bookkeeper",
        "social media manager", "lab technician", "museum educator"]
#: Things people buy and complain about (singular, without an article).
ITEMS = ["robot vacuum", "coffee grinder", "fitness tracker", "blender", "smart thermostat", "standing desk",
         "camping lantern", "pair of headphones", "air fryer", "electric toothbrush", "desk lamp", "baby monitor"]
DEFECTS = ["stopped working after a week", "arrived with a cracked case", "makes a loud grinding noise",
           "stopped turning on", "is missing two of the parts listed on the box",
           "turns off by itself after a few minutes", "smells like burning plastic when it runs"]
LANGUAGES_SPOKEN = ["Spanish", "French", "German", "Italian", "Japanese", "Portuguese", "Korean", "Dutch"]
RELATIVES = ["mom", "dad", "grandmother", "grandfather", "aunt", "best friend", "sister", "brother", "uncle"]

#: Values of the ``{placeholders}`` of ``fill``: a list, or a function of the generator.
VALUES: dict[str, list[str] | Callable[[random.Random], str]] = {
    "name": m.NAMES, "surname": SURNAMES, "day": WEEKDAYS[:5], "weekday": WEEKDAYS, "month": MONTHS,
    "city": CITIES, "town": f.CITIES, "company": f.COMPANIES, "item": ITEMS, "shop": [b.split(" ", 1)[1] for b in f.BUSINESSES], "topic": m.TOPICS,
    "adj": f.ADJECTIVES, "lang": m.LANGUAGES, "aud": m.AUDIENCES, "readers": READERS, "tone": TONES,
    "mood": MOODS, "job": JOBS, "defect": DEFECTS, "field": f.FIELDS, "relative": RELATIVES, "role": ROLES,
    "place": m.PLACES, "person": m.PEOPLE, "persona": m.PERSONAS,
    "spoken": LANGUAGES_SPOKEN, "famous": f.PEOPLE_FAMOUS, "country": f.COUNTRIES,
    # no 8, 11 or 18 where "a {n}-day ..." must not read "an"
    "n": lambda r: str(r.choice([2, 3, 4, 5, 6, 7, 9, 10, 12])), "num": lambda r: str(r.randint(12, 95)),
    "born": lambda r: str(r.randint(1955, 1999)), "short": lambda r: str(r.choice([40, 50, 60, 80, 100])),
    "long": lambda r: str(r.choice([200, 300, 400, 500])), "grocery": lambda r: str(r.choice([90, 120, 150, 180, 200])),
    "mins": lambda r: r.choice(["five-minute", "ten-minute", "15-minute", "20-minute"]), "date": lambda r: str(r.randint(2, 28)),
    "pct": lambda r: str(r.choice([5, 10, 15, 20, 25, 30, 40])),
    "money": lambda r: r.choice(["150", "300", "450", "800", "1,200", "2,500", "5,000", "12,000"]),
    "words": lambda r: str(r.choice([60, 80, 100, 120, 150, 200, 250, 300, 400, 500])),
    "small": lambda r: r.choice(["two", "three", "four"]), "k": lambda r: r.choice(["two", "three", "four", "five"]),
    "sentences": lambda r: str(r.choice([3, 4, 5, 6, 8])), "lines": lambda r: str(r.choice([8, 12, 14, 16, 20])),
    "L": lambda r: r.choice("ABCDEFGHLMNPRSTW"), "age": lambda r: str(r.choice([4, 5, 6, 7, 9, 10])),
    "time": lambda r: r.choice(["8:30 am", "9 am", "10:30 am", "noon", "1:15 pm", "3 pm", "6 pm", "7:30 pm"]),
    "ord": lambda r: r.choice(["10th", "18th", "21st", "25th", "30th", "40th", "50th", "60th", "70th"]),
    "scheme": lambda r: r.choice(["ABAB", "AABB", "ABCB"]),
    "analogy": lambda r: r.choice(["cooking", "sports", "city traffic", "a busy restaurant", "a library", "gardening"]),
}
_KEY = re.compile(r"\{([A-Za-z]+)(\d?)\}")


def fill(r: random.Random, text: str) -> str:
    """Replace every ``{key}`` / ``{keyN}`` by a value of ``VALUES[key]``, left to right: the same
    placeholder gets the same value throughout ``text``; ``{name}``, ``{name2}`` ... differ."""
    got: dict[str, str] = {}
    used: dict[str, set[str]] = {}

    def one(match: re.Match[str]) -> str:
        ph = match.group(0)
        if ph not in got:
            key, src = match.group(1), VALUES[match.group(1)]
            taken = used.setdefault(key, set())
            for _ in range(20):
                val = src(r) if callable(src) else r.choice(src)
                if val not in taken:
                    break
            taken.add(val)
            got[ph] = val
        return got[ph]

    return _KEY.sub(one, text)


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def a_(phrase: str) -> str:
    """``phrase`` with "a" or "an" before it (by its first letter: enough for these lists)."""
    return ("an " if phrase[:1].lower() in "aeio" else "a ") + phrase


def pick(r: random.Random, options: list[str]) -> str:
    """One option, filled."""
    return fill(r, r.choice(options))


#: A request around an imperative verb phrase ("write a poem about ..."), as users type it.
ASKS = ["{Vp}.", "{Vp}.", "Can you {vp}?", "Could you {vp}?", "Please {vp}.", "I need you to {vp}.",
        "I'd like you to {vp}.", "Would you {vp}?", "I want you to {vp}.", "Help me {vp}.", "Can you please {vp}?",
        "I was hoping you could {vp}."]


def ask(r: random.Random, vp: str) -> str:
    form = r.choice([a for a in ASKS if not a.startswith("Help")] if vp.startswith("help ") else ASKS)
    return form.replace("{Vp}", cap(vp)).replace("{vp}", vp)


_INTROS = ["I'm {role}.", "I'm {role}.", "Quick background: I'm {role}.", "Some context: I'm {role}.",
           "A bit about me: I'm {role}.", "For context, I'm {role}.", "Hi! I'm {role}.", "Hello, I'm {role}."]


def frame(r: random.Random, why: list[str], p_role: float = 0.4, p_why: float = 0.6) -> str:
    """An optional "who I am" sentence and an optional reason (one of ``why``, filled)."""
    parts = []
    if r.random() < p_role:
        parts.append(fill(r, r.choice(_INTROS)))
    if why and r.random() < p_why:
        parts.append(pick(r, why))
    return " ".join(parts)


def join_and(r: random.Random, items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    comma = "," if len(items) > 2 and r.random() < 0.5 else ""
    return ", ".join(items[:-1]) + f"{comma} and {items[-1]}"

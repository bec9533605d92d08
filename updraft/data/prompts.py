"""Training prompts for self-distilled draft heads: topic lists x task templates, deterministic.

``build_prompts(n, seed)`` returns ``n`` distinct instructions across writing, explanation,
question answering, lists, coding (write / complete / explain / fix), math word problems,
dialogue, persona role play, essays (science, history, humanities), reasoning, multi-turn advice
and passage tasks, and the evaluation-style categories of ``updraft.data.styles`` (short
instructions, factual questions, function completion, news summaries, extraction from a given
text, multi-turn reworks). Two kinds are two-stage:

* passage: the target model first writes a passage (``TrainPrompt.text``), then gets
  ``TrainPrompt.followup`` with its own passage in place of ``{passage}`` (summarise it, extract
  facts or a table, rewrite it, ...): long-context, copy-heavy responses like summarisation and
  extraction without using anyone's articles;
* advice: a second user turn (``TrainPrompt.second_turn``) in the same conversation, after the
  model's own first answer (shorten it, make a plan of it, rewrite it for someone else, ...).

* self_instruct (set v4 only, ``updraft.data.self_instruct``): the target first writes ONE
  realistic user request (task kind x subject x user x tone x format constraint), then answers
  it, cleaned (``updraft.data.clean``; a templated fallback request of the same kind and subject
  when it is unusable), as the only user turn of a NEW conversation: requests in the target's
  own phrasing rather than our templates'.

* brief (set v5 only, ``updraft.data.briefs``): long first-turn requests as real users write
  them (single stage): an optional "who I am / why" framing, a concrete task in one of many
  domains (writing, role play, reasoning, math, coding, extraction from or rewriting of a short
  pasted text, STEM and humanities explanations, plans and advice), then 1-4 constraints on
  length, format, tone, audience, what to include or avoid.

* free_turn (set v6 only, ``updraft.data.free_turn``): the target continues an open user turn
  (nothing, or a short opener such as "Write" or "I have this code") as the user, sampled from
  its own chat distribution; that message, cleaned, is the only user turn of a NEW conversation.

(``news`` is a passage task with a long article; ``multiturn`` a second turn after any first.)
Both stages of every two-stage kind are training sequences (``updraft.train.data``), except a
free turn's first (the user's side, which a head never drafts).

Prompt sets (``build_prompts(n, seed, prompt_set)``, ``TrainConfig.prompt_set``): ``v3``
(``WEIGHTS``, the default and the shipped head's recipe: its output for every ``(n, seed)`` is
frozen, pinned by hash in tests/data/test_prompt_sets.py), ``v4`` (``WEIGHTS_V4``: v3 plus
self_instruct at a third of the prompts), ``v5`` (``WEIGHTS_V5``: v3 plus brief at 40% of the
prompts) and ``v6`` (``WEIGHTS_V6``: v5 plus free_turn at half of the prompts). Everything is generated from ``updraft.data.material`` /
``facts`` by a seeded ``random.Random``: the same ``(n, seed, prompt_set)`` always gives the same
list (the order of the lists and templates is part of the contract; a new category goes into a
new set, never into an old one). The EAGLE evaluation sets are held out and never read here.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from updraft.data import material as m
from updraft.data import styles
from updraft.data.briefs import brief
from updraft.data.free_turn import free_turn
from updraft.data.self_instruct import self_instruct
from updraft.data.types import Message, TrainPrompt

__all__ = [
    "PROMPTS_VERSION", "PROMPT_SETS", "WEIGHTS", "WEIGHTS_V4", "WEIGHTS_V5", "WEIGHTS_V6", "Message", "TrainPrompt", "build_prompts",
    "check_prompt_set", "prompts_version", "split_prompts",
]

#: Version of the default set, v3 (the recipe of the shipped head). Each set has its own version
#: (``prompts_version``); ``updraft.train`` keys its data cache on it, so a set's version is
#: bumped whenever its output for a given ``(n, seed)`` changes, and v3's never changes.
PROMPTS_VERSION = 3


def _concept(r: random.Random) -> str:
    return r.choice(m.CONCEPTS[r.choice(sorted(m.CONCEPTS))])


def _writing(r: random.Random) -> str:
    t, form, style = r.choice(m.TOPICS), r.choice(m.WRITING_FORMS), r.choice(m.STYLES)
    templates = [
        f"Write a {style} {form} about {t}.",
        f"Write a {form} set in {r.choice(m.PLACES)} that involves {r.choice(m.PEOPLE)}.",
        f"Compose a {form} for {r.choice(m.AUDIENCES)} about {t}. Keep the tone {style}.",
        f"Write an email to a colleague proposing a workshop on {t}. Make it {style} and under 200 words.",
        f"Draft a short speech opening a community event about {t}.",
        f"Write the opening paragraph of a novel that begins in {r.choice(m.PLACES)}.",
        f"Write a product review of an imaginary gadget that helps with {t}.",
        f"Write a {style} social media post announcing a new club devoted to {t}.",
        f"Write a cover letter for {r.choice(m.PEOPLE)} applying to a job related to {t}.",
        f"Describe {r.choice(m.PLACES)} in vivid detail, as the first page of a travel guide.",
        f"Write a motivational message for {r.choice(m.AUDIENCES)} who is nervous about {t}.",
        f"Write a {form} in which {r.choice(m.PEOPLE)} and {r.choice(m.PEOPLE)} discover something about {t}.",
    ]
    return r.choice(templates)


def _explain(r: random.Random) -> str:
    c, who = _concept(r), r.choice(m.AUDIENCES)
    templates = [
        f"Explain {c} to {who}.",
        f"How does {c} work? Give a clear explanation with an example.",
        f"Explain {c} in three short paragraphs.",
        f"What are the most common misconceptions about {c}?",
        f"Give an analogy that helps {who} understand {c}, then explain where the analogy breaks down.",
        f"Explain the difference between {c} and {_concept(r)}.",
        f"Why is {c} important? Answer in a few sentences.",
        f"Teach me {c} step by step, assuming I know nothing about it.",
        f"Write a short lesson plan for teaching {c} to {who}.",
        f"Describe the history of {r.choice(m.TOPICS)} in a few paragraphs.",
    ]
    return r.choice(templates)


def _qa(r: random.Random) -> str:
    c, t = _concept(r), r.choice(m.TOPICS)
    templates = [
        f"What is {c}?", f"Who benefits most from {t}?", f"What are the main causes of problems with {t}?",
        f"When did people first start studying {c}?", f"Is {t} a good idea? Give a balanced answer.",
        f"What would happen if {c} stopped working?", f"Where can a beginner learn more about {t}?",
        f"What is the single most useful fact about {c}?", f"Why do some people dislike {t}?",
        f"How has {t} changed over the last hundred years?", f"Can you define {c} in one sentence?",
    ]
    return r.choice(templates)


def _lists(r: random.Random) -> str:
    t, n = r.choice(m.TOPICS), r.choice([3, 4, 5, 6, 7, 8, 10])
    templates = [
        f"List {n} tips for {r.choice(m.AUDIENCES)} interested in {t}.",
        f"Give {n} pros and {n} cons of {t}.",
        f"Name {n} interesting facts about {t}, one line each.",
        f"Make a checklist of {n} steps to get started with {t}.",
        f"Suggest {n} names for a podcast about {t}, with a one-line pitch for each.",
        f"List {n} questions a journalist should ask an expert on {t}.",
        f"Create a {n}-day plan to learn the basics of {t}.",
        f"Write {n} quiz questions about {_concept(r)}, with answers.",
    ]
    return r.choice(templates)


def _coding(r: random.Random) -> str:
    lang, task = r.choice(m.LANGUAGES), r.choice(m.CODE_TASKS)
    sig, doc = r.choice(m.CODE_STUBS)
    stub = f'{sig}\n    """{doc}\n    """\n'
    templates = [
        f"Write a {lang} function that {task}.",
        f"Write a {lang} function that {task}. Include comments and a short usage example.",
        f"Complete the following Python function.\n\n{stub}",
        f"Finish this function so that it passes its doctest:\n\n{stub}",
        f"Explain, line by line, how you would write a {lang} function that {task}.",
        f"What is the time complexity of a function that {task}? Show an implementation in {lang}.",
        f"Write unit tests in {lang} for a function that {task}.",
        f"Rewrite a {r.choice(m.LANGUAGES)} function that {task} in {lang}, and explain the differences.",
        f"Here is a buggy start:\n\n{sig}\n    pass\n\nFix it so that it does this: {doc.splitlines()[0]}",
    ]
    return r.choice(templates)


def _math(r: random.Random) -> str:
    a, b = r.sample(m.NAMES, 2)
    (item, box) = r.choice(m.ITEMS)
    x, y, z = r.randint(2, 12), r.randint(2, 9), r.randint(3, 40)
    price, pct = r.choice([2, 3, 4, 5, 8, 12, 15, 20]), r.choice([10, 20, 25, 50])
    speed, hours = r.choice([30, 40, 45, 60, 75]), r.choice([2, 3, 4, 5])
    templates = [
        f"{a} has {z} {item}. {a} buys {x} {box}s with {y} {item} in each. How many {item} does {a} have now?",
        f"{a} and {b} share {x * y} {item} in the ratio {x}:{y}. How many {item} does {b} get?",
        f"A {box} holds {y} {item}. How many {box}s are needed for {x * y + z} {item}?",
        f"{a} earns ${price * 10} per day and saves {pct}% of it. How much does {a} save in {x} weeks of 5 working days?",
        f"A train travels at {speed} km/h for {hours} hours, then at {speed // 3 * 2} km/h for {y} hours. How far does it go?",
        f"A shirt costs ${price * 5}. It is discounted by {pct}%, then {a} pays 8% sales tax on the discounted price. What is the total?",
        f"{a} is {x} years older than {b}. In {y} years, the sum of their ages will be {2 * z + x + 2 * y}. How old is {b} now?",
        f"A rectangle has a perimeter of {2 * (x + z)} cm and one side of {x} cm. What is its area?",
        f"{a} reads {y} pages on weekdays and {y * 2} pages each weekend day. How many pages in {x} weeks?",
        f"{a} had {z + x * y} {item}, gave {b} {x}, and split the rest equally into {y} {box}s. How many are in each {box}, and how many are left over?",
        f"A tank holds {z * 10} liters. A pump fills it at {y + 3} liters per minute while it leaks 1 liter per minute. How long until it is full?",
        f"Solve for x: {y}x + {z} = {y * x + z}. Show your steps.",
        f"What is {pct}% of {z * 20}, and what is that number increased by {x}%?",
    ]
    return r.choice(templates) + r.choice(["", " Explain step by step.", " Show your reasoning.", " Give the final answer at the end."])


def _dialogue(r: random.Random) -> str:
    p1, p2, t = r.choice(m.PEOPLE), r.choice(m.PEOPLE), r.choice(m.TOPICS)
    templates = [
        f"Write a dialogue between {p1} and {p2} about {t}.",
        f"Pretend you are {p1}. Tell me about your typical day, and mention {t}.",
        f"Role-play as {p1} giving advice to {r.choice(m.AUDIENCES)} about {t}.",
        f"Imagine you are {p1} stuck in {r.choice(m.PLACES)}. Describe what you do next, in the first person.",
        f"Write an interview with {p1} about {t}, with at least five questions.",
        f"You are a customer support agent for a company that sells products for {t}. Reply to an angry customer whose order arrived late.",
    ]
    return r.choice(templates)


def _reasoning(r: random.Random) -> str:
    t1, t2 = r.sample(m.TOPICS, 2)
    templates = [
        f"Compare {t1} and {t2}: what do they have in common, and how do they differ?",
        f"A city has money for only one project: one about {t1} or one about {t2}. Argue for one choice.",
        f"What are the second-order effects of {t1} becoming twice as popular?",
        f"Evaluate this claim: '{t1} matters more than {t2}.' Consider both sides.",
        f"If you had to explain {t1} using only ideas from {t2}, how would you do it?",
        f"Plan a week-long school project that connects {t1} with {t2}.",
        f"Three friends disagree about {t1}. One loves it, one hates it, one is unsure. Write each person's argument.",
    ]
    return r.choice(templates)


#: Stage-two instructions of passage tasks; ``{passage}`` is the model's own text.
FOLLOWUPS = [
    "Summarize the following text in {k} sentences.\n\n{passage}",
    "Summarize: {passage}",
    "Write a headline and a one-paragraph summary for this article:\n\n{passage}",
    "Extract the key facts from the text below as a bulleted list.\n\n{passage}",
    "Read the passage and answer: what is its main point, and what evidence supports it?\n\n{passage}",
    "Rewrite the following text in a more formal tone, keeping every fact.\n\n{passage}",
    "Give a TL;DR of this text, then list three questions it leaves open.\n\n{passage}",
    "Turn the following text into five quiz questions with answers.\n\n{passage}",
    "Extract every person, place, date and number mentioned in the text below and return them as JSON.\n\n{passage}",
    "From the passage below, make a Markdown table of the main facts (two columns: fact, detail).\n\n{passage}",
    "List the claims made in this text and say which are supported by evidence in it.\n\n{passage}",
    "Identify the three most important sentences in the text and quote them exactly.\n\n{passage}",
]


def _passage(r: random.Random) -> TrainPrompt:
    t, words = r.choice(m.TOPICS), r.choice([200, 250, 300, 350, 400])
    kind = r.choice(["news article", "magazine feature", "encyclopedia-style article", "report", "opinion column"])
    text = r.choice(
        [
            f"Write a {words}-word {kind} about {t}.",
            f"Write a detailed {kind} of about {words} words on {t}, with names, numbers and quotes.",
            f"Write a {kind} about a local event connected to {t}. Aim for {words} words.",
        ]
    )
    followup = r.choice(FOLLOWUPS).replace("{k}", str(r.choice([2, 3, 4])))
    return TrainPrompt(text, "passage", followup)


def _advice(r: random.Random) -> TrainPrompt:
    sit, who = r.choice(m.SITUATIONS), r.choice(m.PEOPLE)
    text = r.choice(
        [
            f"I work as {who}, and {sit}. What should I do?",
            f"I need some advice: {sit}. Any suggestions?",
            f"{sit[0].upper() + sit[1:]}. Give me practical advice, step by step.",
            f"My situation: {sit}. What are my options, and which would you pick?",
            f"Quick background: I'm {who}. {sit[0].upper() + sit[1:]}. How would you handle it?",
        ]
    )
    return TrainPrompt(text, "advice", second_turn=r.choice(m.SECOND_TURNS))


def _roleplay(r: random.Random) -> str:
    who, t = r.choice(m.PERSONAS), r.choice(m.TOPICS)
    templates = [
        f"Pretend you are {who}. In character, tell me what you think about {t}.",
        f"Act as {who}. Stay in character and answer: what is the best advice you ever received?",
        f"You are {who}. Describe your morning to me, in the first person, and mention {t}.",
        f"Embody {who} and give a short speech to a crowd about {t}.",
        f"Role-play: you are {who} and I am a new apprentice. Introduce yourself and explain my first task.",
        f"Imagine you are {who} writing a letter home about {r.choice(m.PLACES)}.",
    ]
    return r.choice(templates)


def _essay(r: random.Random) -> str:
    subj, who, n = r.choice(m.ESSAY_SUBJECTS), r.choice(m.AUDIENCES), r.choice([150, 200, 300, 400])
    templates = [
        f"Write a {n}-word essay explaining {subj}.",
        f"In about {n} words, explain {subj} to {who}.",
        f"Explain {subj} to {who}, with at least one concrete example.",
        f"Write a five-paragraph essay on {subj}: introduction, three points, conclusion.",
        f"Discuss {subj}. What do experts agree on, and where do they disagree?",
        f"Give a structured overview of {subj} with headings.",
    ]
    return r.choice(templates)


_SIMPLE: dict[str, Callable[[random.Random], str]] = {
    "writing": _writing,
    "explain": _explain,
    "qa": _qa,
    "lists": _lists,
    "coding": _coding,
    "math": _math,
    "dialogue": _dialogue,
    "reasoning": _reasoning,
    "roleplay": _roleplay,
    "essay": _essay,
}
#: First turns of ``multiturn`` tasks: writing, role play, reasoning, math, coding, STEM
#: (explanations) and humanities (essays), as the multi-turn chat benchmarks mix them.
_FIRST_TURNS = {k: _SIMPLE[k] for k in ("writing", "roleplay", "reasoning", "math", "coding", "explain", "essay")}
_STAGED: dict[str, Callable[[random.Random], TrainPrompt]] = {
    "passage": _passage,
    "advice": _advice,
    "instruct": styles.instruct,
    "factual": styles.factual,
    "code_complete": styles.code_complete,
    "news": styles.news,
    "extraction": styles.extraction,
    "multiturn": lambda r: styles.multiturn(r, _FIRST_TURNS),
    "self_instruct": self_instruct,
    "brief": brief,
    "free_turn": free_turn,
}
#: Category weights (passage, news, advice and multi-turn tasks produce two training responses
#: each). Version 3 leans toward the evaluation styles: short instructions, factual questions,
#: function completion, summaries of long articles, multi-turn reworks.
WEIGHTS = {
    "writing": 9, "explain": 6, "qa": 4, "lists": 5, "coding": 7, "math": 9, "dialogue": 4, "reasoning": 5,
    "passage": 7, "advice": 3, "roleplay": 6, "essay": 3,
    "instruct": 12, "factual": 10, "code_complete": 9, "news": 10, "extraction": 5, "multiturn": 10,
}
#: Set v4: v3's categories and weights plus self-instruct requests at half their total weight
#: (a third of the prompts).
WEIGHTS_V4 = WEIGHTS | {"self_instruct": sum(WEIGHTS.values()) // 2}
#: Set v5: v3's categories and weights plus long first-turn requests (``brief``) at two thirds
#: of their total weight (40% of the prompts): real users' prompts, where v3's head drafts worst.
WEIGHTS_V5 = WEIGHTS | {"brief": round(sum(WEIGHTS.values()) * 2 / 3)}
#: Set v6: v5 plus as many free user turns (``free_turn``: the target writes the user's turn
#: itself, from its own chat distribution): half of the prompts.
WEIGHTS_V6 = WEIGHTS_V5 | {"free_turn": sum(WEIGHTS_V5.values())}
#: Prompt sets by name: (category weights, version).
_SETS: dict[str, tuple[dict[str, int], int]] = {
    "v3": (WEIGHTS, PROMPTS_VERSION), "v4": (WEIGHTS_V4, 4), "v5": (WEIGHTS_V5, 5), "v6": (WEIGHTS_V6, 6),
}
PROMPT_SETS = tuple(_SETS)


def check_prompt_set(prompt_set: str) -> str:
    if prompt_set not in _SETS:
        raise ValueError(f"prompt_set={prompt_set!r} is invalid: choose one of {', '.join(PROMPT_SETS)}")
    return prompt_set


def prompts_version(prompt_set: str) -> int:
    """The version of a prompt set (what cached generations and carried head states record)."""
    return _SETS[check_prompt_set(prompt_set)][1]


def _make(cat: str, r: random.Random) -> TrainPrompt:
    if cat in _STAGED:
        return _STAGED[cat](r)
    return TrainPrompt(_SIMPLE[cat](r), cat)


def build_prompts(n: int, seed: int = 0, prompt_set: str = "v3") -> list[TrainPrompt]:
    """``n`` distinct prompts (by text) of ``prompt_set``, deterministic in ``(n, seed,
    prompt_set)``; a prefix of a longer list with the same seed is NOT guaranteed (sampling
    continues differently), so callers that split train / held-out take both from one call."""
    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    table = _SETS[check_prompt_set(prompt_set)][0]
    r = random.Random(seed)
    cats = sorted(table)
    weights = [table[c] for c in cats]
    out: list[TrainPrompt] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise ValueError(f"could not build {n} distinct prompts (got {len(out)}); the template space is smaller")
        cat = r.choices(cats, weights)[0]
        p = _make(cat, r)
        if p.open_turn:  # distinct by its sampling seed (the prompt's index), not by its opener
            out.append(p)
            continue
        if p.text in seen:
            continue
        seen.add(p.text)
        out.append(p)
    return out


def split_prompts(prompts: list[TrainPrompt], held_out: int, seed: int = 0) -> tuple[list[TrainPrompt], list[TrainPrompt]]:
    """(train, held-out): ``held_out`` prompts chosen by ``seed``, disjoint from the rest."""
    idx = list(range(len(prompts)))
    random.Random(seed + 1).shuffle(idx)
    held = set(idx[: min(held_out, len(prompts))])
    return [p for i, p in enumerate(prompts) if i not in held], [p for i, p in enumerate(prompts) if i in held]

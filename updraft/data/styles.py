"""Prompt generators in the styles draft heads are evaluated on, written without the evaluation
sets (``updraft.data.prompts`` mixes them with the general categories):

* ``instruct``: one-line instructions (classify, rewrite, convert, name, brainstorm ...);
* ``factual``: short factual questions (who / when / where / what ...), often in lower case as
  people type them into a search box;
* ``code_complete``: a Python function to complete from its signature and a docstring with
  doctest examples (the response is the function body, or the whole function);
* ``news``: two-stage summarisation of a LONG given text: the model first writes a news article
  on a made-up event (up to ``NEWS_TOKENS`` tokens), then summarises that article, which sits in
  the prompt -- a copy-heavy response over a long input;
* ``extraction``: a short inline text (reviews, company figures, a schedule) with a request to
  pull facts out of it as a list, JSON or a table;
* ``multiturn``: a first turn of the writing / role play / reasoning / math / coding / STEM /
  humanities kind, then a second user turn that asks to rework the answer.

Each generator takes a seeded ``random.Random`` and returns a ``TrainPrompt``; deterministic.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from updraft.data import facts as f
from updraft.data import material as m
from updraft.data.types import TrainPrompt

#: Response cap of the article stage of ``news`` tasks (news-length inputs for the summary).
NEWS_TOKENS = 640


def _casual(r: random.Random, q: str) -> str:
    """Half of the questions lower-cased after the first letter, as typed into a search box."""
    return q[0] + q[1:].lower() if r.random() < 0.5 else q


def factual(r: random.Random) -> TrainPrompt:
    templates = [
        lambda: f"What is the capital of {r.choice(f.COUNTRIES)}?",
        lambda: f"Who wrote {r.choice(f.BOOKS)}?",
        lambda: f"When was {r.choice(f.INVENTIONS)} invented?",
        lambda: f"Who invented {r.choice(f.INVENTIONS)}?",
        lambda: f"Where is {r.choice(f.LANDMARKS)} located?",
        lambda: f"When was {r.choice(f.LANDMARKS)} built?",
        lambda: f"What is the chemical symbol for {r.choice(f.ELEMENTS)}?",
        lambda: f"How long does it take {r.choice(f.PLANETS)} to orbit the sun?",
        lambda: f"How many moons does {r.choice(f.PLANETS)} have?",
        lambda: f"How many legs does {r.choice(f.ANIMALS)} have?",
        lambda: f"How long does {r.choice(f.ANIMALS)} live?",
        lambda: f"When did {r.choice(f.HISTORY_EVENTS)} happen?",
        lambda: f"Who is known as the father of {r.choice(f.FIELDS)}?",
        lambda: f"What does {r.choice(f.ACRONYMS)} stand for?",
        lambda: f"Who was the first {r.choice(f.ROLES)}?",
        lambda: f"What language is spoken in {r.choice(f.COUNTRIES)}?",
        lambda: f"What currency is used in {r.choice(f.COUNTRIES)}?",
        lambda: f"Which country has won the most {r.choice(f.SPORTS)} world cups?",
        lambda: f"How many players are on a {r.choice(f.SPORTS)} team?",
        lambda: f"What is the population of {r.choice(f.COUNTRIES)}?",
        lambda: f"Why did {r.choice(f.HISTORY_EVENTS)} happen?",
        lambda: f"What is the melting point of {r.choice(f.ELEMENTS)}?",
        lambda: f"What is the {r.choice(f.COUNTRY_FACTS)} of {r.choice(f.COUNTRIES)}?",
        lambda: f"When did {r.choice(f.COUNTRIES)} become independent?",
        lambda: f"Which countries border {r.choice(f.COUNTRIES)}?",
        lambda: f"When was {r.choice(f.PEOPLE_FAMOUS)} born?",
        lambda: f"What is {r.choice(f.PEOPLE_FAMOUS)} famous for?",
        lambda: f"Where did {r.choice(f.PEOPLE_FAMOUS)} grow up?",
        lambda: f"How did {r.choice(f.PEOPLE_FAMOUS)} die?",
        lambda: f"Who influenced {r.choice(f.PEOPLE_FAMOUS)} the most?",
        lambda: f"Did {r.choice(f.PEOPLE_FAMOUS)} ever visit {r.choice(f.COUNTRIES)}?",
        lambda: f"Who was president when {r.choice(f.HISTORY_EVENTS)} happened?",
        lambda: f"Where does {r.choice(f.ANIMALS)} live in the wild?",
        lambda: f"What does {r.choice(f.ANIMALS)} eat?",
        lambda: f"Who is the main character in {r.choice(f.BOOKS)}?",
        lambda: f"When was {r.choice(f.BOOKS)} published?",
    ]
    suffix = r.choice(["", "", "", " Answer briefly.", " Give a little context too.", " Explain in a few sentences."])
    return TrainPrompt(_casual(r, r.choice(templates)()) + suffix, "factual")


def _sentence(r: random.Random) -> str:
    return f"{r.choice(m.NAMES)} {r.choice(f.VERBS_PAST)} {r.choice(f.OBJECTS)} {r.choice(f.TIMES)}."


def instruct(r: random.Random) -> TrainPrompt:
    adj, biz, goal, t = r.choice(f.ADJECTIVES), r.choice(f.BUSINESSES), r.choice(f.GOALS), r.choice(m.TOPICS)
    words, kind = r.choice(f.GROUPS)
    units = r.choice(f.UNITS)
    templates = [
        lambda: f"Give three synonyms for the word '{adj}'.",
        lambda: f"What is the opposite of '{adj}'? Use it in a sentence.",
        lambda: f"Rewrite the following sentence in the passive voice: {_sentence(r)}",
        lambda: f"Rewrite this sentence so it sounds more exciting: {_sentence(r)}",
        lambda: f"Identify the verb and the object in this sentence: {_sentence(r)}",
        lambda: f"Classify the following as {kind}: {', '.join(r.sample(words, 4))}.",
        lambda: f"Find the odd one out: {', '.join(r.sample(words, 4))}.",
        lambda: f"Generate a catchy slogan for {biz}.",
        lambda: f"Suggest five names for {biz}.",
        lambda: f"Write a one-sentence description of {biz}.",
        lambda: f"Brainstorm three ways to {goal}.",
        lambda: f"Give me one tip to {goal}.",
        lambda: f"Convert {r.randint(2, 90)} {units[0]} to {units[1]}.",
        lambda: f"Calculate the area of a circle with a radius of {r.randint(2, 20)} cm.",
        lambda: f"Create a haiku about {t}.",
        lambda: f"Compose a tweet about {t}.",
        lambda: f"Suggest a title for an article about {t}.",
        lambda: f"Describe {t} in one sentence.",
        lambda: f"Generate a list of five questions about {t}.",
        lambda: f"Explain why {r.choice(m.CONCEPTS['science'])} matters, in two sentences.",
        lambda: f"Give an example of {r.choice(m.CONCEPTS[r.choice(sorted(m.CONCEPTS))])}.",
        lambda: f"Write a sentence using the word '{adj}'.",
        lambda: f"Edit this sentence for grammar: {r.choice(m.NAMES)} have went to {r.choice(m.PLACES)} and seen many thing.",
        lambda: f"Sort these numbers from smallest to largest: {', '.join(str(x) for x in r.sample(range(1, 200), 6))}.",
    ]
    return TrainPrompt(r.choice(templates)(), "instruct")


def code_complete(r: random.Random) -> TrainPrompt:
    sig, doc = r.choice(f.PY_STUBS)
    quote = r.choice(['"""', "'''"])
    stub = f"{r.choice(f.PY_PRELUDES)}{sig}\n    {quote}{doc}\n    {quote}\n"
    lead = r.choice([
        "Complete the code below.", "Complete the following Python function.", "Finish the code I wrote.",
        "Complete this function so that its examples pass.", "Fill in the body of this function.",
        "Complete the Python code.", "Implement the function below.",
    ])
    sep = r.choice(["\n\n", "\n"])
    return TrainPrompt(f"{lead}{sep}{stub}", "code_complete")


def _event(r: random.Random) -> str:
    event = r.choice(f.EVENTS).replace("{n}", str(r.choice([3, 12, 25, 40, 75, 120, 300, 1500])))
    return f"{r.choice(f.ORGS)} in {r.choice(f.CITIES)} {event}"


#: Stage-two instructions of news tasks (``{passage}``: the model's own article).
NEWS_FOLLOWUPS = [
    "Summarize: {passage}",
    "Summarize: {passage}",
    "Summarize the following article.\n\n{passage}",
    "Summarize this news story in {k} sentences:\n\n{passage}",
    "Write the highlights of this article as {k} short bullet points.\n\n{passage}",
    "{passage}\n\nSummarize the article above.",
    "Article: {passage}\n\nSummary:",
    "Give a one-paragraph summary of this report.\n\n{passage}",
]


def news(r: random.Random) -> TrainPrompt:
    ev, words = _event(r), r.choice([400, 500, 600])
    text = r.choice([
        f"Write a news article of about {words} words reporting that {ev}. Include names, quotes from officials and "
        "residents, dates and numbers.",
        f"Write a detailed newspaper report ({words} words) on this event: {ev}. Quote at least two people.",
        f"You are a local journalist. Write a full news story about how {ev}, with a headline.",
    ])
    followup = r.choice(NEWS_FOLLOWUPS).replace("{k}", str(r.choice([2, 3, 4])))
    return TrainPrompt(text, "news", followup=followup, max_tokens=NEWS_TOKENS)


def _inline_text(r: random.Random) -> tuple[str, str]:
    """(a short text, what to extract from it)."""
    kind = r.randrange(3)
    if kind == 0:
        lines = [f"Review {i + 1} ({r.choice(f.PRODUCTS)}): it {r.choice(f.REVIEW_PHRASES)}." for i in range(r.randint(3, 5))]
        return "\n".join(lines), r.choice([
            "For each review, give the product and a rating from 1 to 5 as JSON.",
            "Which reviews are positive and which are negative? Answer as a list.",
        ])
    if kind == 1:
        cos = r.sample(f.COMPANIES, r.randint(3, 4))
        lines = [
            f"In {r.randint(2015, 2024)}, {c} reported revenue of ${r.randint(5, 900)} million and "
            f"{r.choice(['hired', 'laid off'])} {r.randint(10, 400)} staff; its chief executive is {r.choice(m.NAMES)} "
            f"{r.choice(['Hale', 'Moreno', 'Okafor', 'Lindqvist', 'Tanaka', 'Petrov'])}."
            for c in cos
        ]
        return " ".join(lines), r.choice([
            "Extract the company names, years and revenues as a Markdown table.",
            "Return a JSON list with the company, its chief executive and its revenue.",
            "Which company had the highest revenue? Quote the sentence that says so.",
        ])
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
    lines = [f"{d}: {r.choice(m.NAMES)} leads the {r.choice(m.TOPICS)} session at {r.randint(8, 17)}:00 in room {r.randint(1, 30)}."
             for d in r.sample(days, 3)]
    return "\n".join(lines), r.choice([
        "List every person with their day, time and room.", "Turn this schedule into a JSON object keyed by day.",
    ])


def extraction(r: random.Random) -> TrainPrompt:
    text, ask = _inline_text(r)
    return TrainPrompt(r.choice([f"{ask}\n\n{text}", f"{text}\n\n{ask}", f"Read the text below.\n{text}\n\n{ask}"]), "extraction")


#: Second user turns that rework the first answer (generic across first-turn kinds).
REWORK_TURNS = [
    "Rewrite your previous answer in exactly three sentences.", "Now make it funnier.",
    "Rewrite it as a short poem.", "Explain your answer to a five-year-old.", "Add a title and three hashtags.",
    "Shorten your answer to under fifty words.", "What are the weak points of your answer?",
    "Give a concrete example that supports your answer.", "Now argue the opposite position.",
    "Convert your answer into a JSON object with the keys 'summary' and 'details'.",
    "Rewrite your answer in a formal tone for a business report.", "Turn your answer into a numbered list.",
    "Continue from where you stopped, adding one more paragraph.", "Translate the main idea into simple English.",
    "Check your answer step by step and correct any mistakes.", "Rewrite it without using the letter 'e' where you can.",
]


def multiturn(r: random.Random, first: dict[str, Callable[[random.Random], str]]) -> TrainPrompt:
    """A first turn from ``first`` (category -> generator), then a rework request."""
    name = r.choice(sorted(first))
    return TrainPrompt(first[name](r), "multiturn", second_turn=r.choice(REWORK_TURNS))

"""``brief`` prompts (prompt set v5): long first-turn user requests, as real users write them.

Measured with the v3 head: drafts are accepted far less often on real users' chat prompts than
on answers to our own templates, and worst over the first ~128 tokens of an answer. Our
templates are mostly one short task; real first turns are several sentences: often who the
user is or why they ask, a concrete task, then constraints on audience, tone, length, format,
what to include or avoid. ``brief(r)`` builds one such request compositionally:

* an optional framing (``brief_base.frame``: "I'm a nurse ...", a reason, a greeting);
* a task from one of ``DOMAINS`` (writing: emails, blog posts, stories, poems, speeches,
  product descriptions, cover letters; role play; reasoning puzzles; math word problems with
  drawn numbers; coding tasks specified in prose; extraction from or rewriting of a short text
  pasted into the request; STEM and humanities explanations; plans and advice), each
  generator in ``brief_writing`` / ``brief_logic`` / ``brief_texts``;
* 1-4 constraints from ``CONSTRAINTS``, only those that fit the task's kind and at most one per
  slot (one length limit, one format ...), phrased as sentences, one sentence or a list;
* an optional closing ("Thanks!").

Deterministic in the ``random.Random`` passed in; the order of every list and branch here and
in the ``brief_*`` modules is part of set v5's contract (a change goes into a new set).
Written for updraft: no evaluation set is read.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from updraft.data import brief_logic as lg
from updraft.data import brief_texts as tx
from updraft.data import brief_writing as wr
from updraft.data.brief_base import Draft, cap, fill, join_and
from updraft.data.types import TrainPrompt

CATEGORY = "brief"

#: (generator, weight): the mix of a real chat workload's first turns.
DOMAINS: list[tuple[Callable[[random.Random], Draft], int]] = [
    (wr.email, 6), (wr.blog, 4), (wr.story, 4), (wr.poem, 3), (wr.speech, 3), (wr.product, 2), (wr.cover_letter, 2),
    (wr.roleplay, 9), (lg.reasoning, 9), (lg.math, 10), (lg.coding, 12),
    (lambda r: tx.passage(r, rewrite=False), 8), (lambda r: tx.passage(r, rewrite=True), 6),
    (tx.stem, 9), (tx.humanities, 7), (tx.plan, 6),
]

#: (slot, kinds it fits, phrasings): each phrasing a verb phrase ("keep it under ..."), filled.
#: Kinds: e email / letter, b blog / article, s story, v poem, h speech, g product copy, p role
#: play, q reasoning, m math, c code, x extraction, t rewrite, n STEM, u humanities, l plan with costs, o other plan, a advice;
#: y a poem of a fixed form (sonnet, limerick, haiku, acrostic: no length, rhyme or line rules).
CONSTRAINTS: list[tuple[str, str, list[str]]] = [
    ("len", "ebsghnu", ["keep it under {words} words", "keep the whole thing under {words} words",
                          "aim for about {words} words", "don't go over {words} words", "make it around {words} words long"]),
    ("len", "bsnulo", ["keep it to {small} paragraphs", "write it in {small} short paragraphs"]),
    ("len", "nuqa", ["answer in no more than {sentences} sentences", "keep the explanation to {sentences} sentences or fewer"]),
    ("len", "e", ["keep it short enough to read on a phone", "keep it to {sentences} sentences at most"]),
    ("len", "h", ["make it about {n} minutes long when read aloud"]),
    ("len", "v", ["keep it to {small} stanzas", "keep it under {lines} lines"]),
    ("len", "lo", ["keep it under {long} words", "keep the whole plan to about {long} words"]),
    ("len", "t", ["keep it under {short} words", "don't make it any longer than the original"]),
    ("len", "p", ["keep each of your replies under {short} words", "keep your replies short, a few sentences at most"]),
    ("fmt", "nulxao", ["use bullet points", "format the main points as a bulleted list"]),
    ("fmt", "lmqo", ["number the steps", "lay it out as a numbered list of steps"]),
    ("fmt", "lnuxo", ["put the key information in a table", "include a small table that summarizes it"]),
    ("fmt", "x", ["return only valid JSON, with no extra commentary", "give me the result as a JSON object"]),
    ("fmt", "bnulo", ["break it into sections with short headings", "use a heading for each section"]),
    ("fmt", "m", ["put the final answer on its own line at the end", "put the final answer in bold"]),
    ("fmt", "g", ["end with three short bullet points of key features"]),
    ("tone", "ebhgplao", ["keep the tone {tone}", "make it sound {tone}"]),
    ("tone", "svy", ["make it {mood}", "keep the mood {mood}"]),
    ("plain", "nutlmgao", ["avoid technical jargon", "avoid jargon, or explain each technical term the first time you use it",
                          "use plain language that {aud} could follow", "keep the vocabulary simple"]),
    ("letter", "s", ["start every sentence with the letter {L}"]),
    ("letter", "v", ["begin every line with the letter {L}"]),
    ("words", "bsvygh", ["work in the words '{adj}' and '{adj2}' naturally", "use the word '{adj}' at least twice"]),
    ("style", "ebsghnuy", ["don't use any exclamation marks", "write it in the second person", "use British spelling",
                           "avoid clichés", "vary the sentence length so it doesn't sound robotic"]),
    ("cliche", "e", ["avoid stock phrases like 'I hope this finds you well'", "don't sound like a template"]),
    ("examples", "nulbo", ["include {k} concrete examples", "give at least {k} real-world examples", "back up each point with an example"]),
    ("question", "bnu", ["end with a question for the reader", "finish with a question that gets people thinking"]),
    ("cta", "bgh", ["end with a clear call to action", "finish with one concrete next step for the audience"]),
    ("proscons", "luao", ["include the pros and cons", "weigh the pros and cons before you recommend anything"]),
    ("steps", "mqlao", ["walk me through it step by step", "show every step of your reasoning",
                        "explain your reasoning step by step before you give the answer"]),
    ("assume", "mqlco", ["state any assumptions you make", "list your assumptions before you start",
                        "tell me what you assumed if anything is ambiguous"]),
    ("title", "bsvy", ["give it a title", "add a catchy title"]),
    ("summary", "nulxo", ["add a one-sentence summary at the end", "start with a two-sentence TL;DR"]),
    ("analogy", "n", ["use an everyday analogy", "include an analogy from {analogy}"]),
    ("mistake", "nlmo", ["mention one common mistake people make", "point out the most common misconception"]),
    ("check", "mq", ["double-check the answer at the end", "check your answer a second way"]),
    ("voice", "s", ["include some dialogue", "tell it in the first person", "write it in the present tense"]),
    ("ending", "s", ["end with a twist", "give it a happy ending", "leave the ending open"]),
    ("rhyme", "v", ["use an {scheme} rhyme scheme", "make it rhyme, but don't force it", "don't make it rhyme"]),
    ("hints", "c", ["use type hints", "include type hints and a docstring", "add a docstring with an example"]),
    ("libs", "c", ["don't use any external libraries", "stick to the standard library"]),
    ("tests", "c", ["add a few unit tests that cover the edge cases", "include a couple of example calls with their expected output"]),
    ("complexity", "c", ["explain the time and space complexity", "keep it efficient and tell me its big-O complexity"]),
    ("comments", "c", ["comment the tricky parts", "keep it readable for a beginner"]),
    ("explain", "c", ["explain how it works in a few sentences after the code", "keep the explanation short, since I mostly need the code"]),
    ("errors", "c", ["raise a clear error for invalid input instead of failing silently", "validate the input"]),
    ("char", "p", ["stay in character the whole time", "don't break character, even if I ask something off-topic"]),
    ("turns", "p", ["ask me one question at a time and wait for my answer", "wait for my reply before you continue"]),
    ("feedback", "p", ["give me honest feedback on how I did at the end", "gently correct my mistakes as we go"]),
    ("open", "p", ["start by introducing yourself", "open by describing the scene in a couple of sentences"]),
    ("budget", "l", ["keep the total cost under ${money}", "assume a budget of about ${money}"]),
    ("schedule", "lo", ["break it down day by day", "organize it week by week"]),
    ("priority", "lao", ["tell me which step matters most", "start with the most important thing"]),
    ("missing", "x", ["write 'not stated' for anything the text doesn't say", "don't add anything that isn't in the text"]),
    ("quote", "x", ["quote the sentence each answer comes from"]),
    ("keep", "t", ["keep every fact and number unchanged", "don't add any new information"]),
    ("changes", "t", ["list the main changes you made afterwards", "briefly explain what you changed and why"]),
]


def constraints(r: random.Random, kind: str, k: int) -> list[str]:
    """Up to ``k`` filled constraints that fit ``kind``, at most one per slot."""
    fits = [c for c in CONSTRAINTS if kind in c[1]]
    r.shuffle(fits)
    out: list[str] = []
    slots: set[str] = set()
    for slot, _, phrasings in fits:
        if len(out) == k:
            break
        if slot not in slots:
            slots.add(slot)
            out.append(fill(r, r.choice(phrasings)))
    return out


_LEADS = ["", "", "", "Please ", "Also, ", "Also, please ", "Make sure you ", "And please "]
_HEADERS = ["Requirements:", "A few constraints:", "Some rules:", "Please follow these:", "Notes:"]


def phrase(r: random.Random, cs: list[str]) -> str:
    """The constraints as a user writes them: sentences, one sentence, an inline or a bulleted list."""
    if not cs:
        return ""
    mode = r.random()
    if len(cs) >= 2 and mode < 0.15:
        return "\n" + r.choice(_HEADERS) + "\n" + "\n".join(f"- {cap(c)}" for c in cs)
    if mode < 0.45:
        lead = r.choice(["", "Please ", "Make sure you ", "Also, please ", "Oh, and "])
        return cap(f"{lead}{join_and(r, cs)}.")
    if len(cs) >= 2 and mode < 0.55:
        return f"{r.choice(['A few requirements', 'Constraints', 'Rules', 'Some details'])}: {'; '.join(cs)}."
    sentences = [cap(f"{r.choice(_LEADS[:5])}{cs[0]}.")]
    sentences += [cap(f"{r.choice(_LEADS)}{c}.") for c in cs[1:]]
    return " ".join(sentences)


_GREETINGS = ["Hi! ", "Hey! ", "Hello! ", "Hi there! "]
_CLOSINGS = ["Thanks!", "Thank you!", "Thanks in advance.", "Thanks so much.", "I appreciate it."]


def assemble(r: random.Random, d: Draft, cs: list[str]) -> str:
    """Framing, task, constraints and closing; a pasted text before or after them."""
    body = " ".join(p for p in (d.frame, d.task) if p)
    if not d.frame.startswith(("Hi", "Hello")) and r.random() < 0.1:
        body = r.choice(_GREETINGS) + body
    rules = phrase(r, cs)
    if rules:
        body += rules if rules.startswith("\n") else " " + rules
    if r.random() < 0.15:
        body += ("\n" if rules.startswith("\n") else " ") + r.choice(_CLOSINGS)
    if d.head:
        body = f"{d.head}\n\n{body}"
    if d.tail:
        body = f"{body}\n\n{d.tail}"
    return body


def brief(r: random.Random) -> TrainPrompt:
    """One long first-turn request (single stage)."""
    gens, weights = zip(*DOMAINS)
    d = r.choices(gens, weights)[0](r)
    k = r.choice([1, 2, 2, 3, 3, 3, 4])
    return TrainPrompt(assemble(r, d, constraints(r, d.kind, k)), CATEGORY)

"""``brief`` requests about a short text the user pastes (extract from it, rewrite it), STEM
and humanities explanations for a given audience, and plans or advice. The pasted texts are
built here from templates and the word lists of ``material`` / ``facts`` (made-up events,
people and companies). Each generator returns a ``Draft`` (``updraft.data.brief_base``).
Written for updraft; list order is part of set v5's contract.
"""

from __future__ import annotations

import random

from updraft.data import material as m
from updraft.data.brief_base import Draft, ask, cap, fill, frame, pick

#: Short texts to paste, by kind: (template, what to extract from that kind).
PASSAGES = {
    "announcement": (
        "{company} will host its annual {topic} fair on {weekday}, {month} {date}, from {time} until late afternoon at the "
        "community center in {town}. Tickets cost ${n} for adults and are free for children under {age}. {name} {surname}, "
        "who is organizing the event, said that more than {num} volunteers have already signed up. Parking is limited, "
        "so visitors are asked to come by bus or by bike.",
        ["the event name, date, time, place and ticket prices", "who is organizing it and how many volunteers there are"]),
    "bio": (
        "{name} {surname} was born in {town} in {born}. After studying {field} at the state university, {name} worked for "
        "{n} years as a {job} before founding {company} with an old friend, {name2}. The company now employs {num} "
        "people and has a second office in {town2}. Outside work, {name} coaches a youth football team and is "
        "learning {spoken}.",
        ["a timeline of the key events with their years", "every person, place and organization mentioned"]),
    "notes": (
        "Meeting notes, {weekday} {month} {date}. Present: {name}, {name2}, {name3} and {name4}. {name} said the website "
        "launch is {n} days behind because the payment provider changed its API. The team agreed to move the launch to "
        "the end of {month2}. {name2} will update the budget by {day}. {name3} will contact the provider before the next "
        "meeting. {name4} raised a concern about {topic}, but no decision was made.",
        ["every action item with its owner and deadline", "the decisions made and the open questions"]),
    "complaint": (
        "hi, i ordered a new {item} from your website on {month} {date} and it {defect}. i already emailed support twice "
        "and nobody answered. i want a replacement or my money back by the end of the week. also the courier left the "
        "box outside in the rain. not happy at all. {name}",
        ["what went wrong, what the customer wants and by when", "the product, the order date and each complaint"]),
    "job": (
        "{company} is looking for a {job} to join its team in {town}. The role is full-time, with {n} days a week in "
        "the office, and pays from ${num},000 a year depending on experience. Candidates need at least {k} years of "
        "experience and should be comfortable with spreadsheets and talking to customers. Applications close on "
        "{month} {date}; send a CV and a short letter to {name} {surname} in HR.",
        ["the job title, location, salary range, requirements and deadline", "what a candidate has to send, and to whom"]),
    "review": (
        "I bought the {item} online about {n} months ago. The good: it was easy to set up and looks great. "
        "The bad: it {defect}, and the manual is useless. Customer service replied within {k} days and gave me a "
        "{pct}% discount code, which was nice. Overall I'd give it three out of five, but I wouldn't pay full price again.",
        ["the pros, the cons and the rating", "every problem the reviewer had and how the company responded"]),
    "draft": (
        "so our {shop} is having a sale this weekend and everything is {pct}% off, and we also have a lot of new "
        "stuff that just came in which is really good, so you should definitely come, we open at {time} both days "
        "and there's free coffee for the first {num} people, also parking is behind the building not in front",
        ["the dates, the discount, the opening time and the extras", "every practical detail a visitor needs"]),
}
EXTRACT_ASKS = ["pull out {what}", "extract {what}", "list {what}", "find {what}"]
EXTRACT_WHY = ["I get dozens of these every week and I'm putting them into a spreadsheet.",
               "I'm building a small database and need the details in a consistent format.",
               "I want to check that I didn't miss anything important.", "My boss asked me for the key details."]
#: How to rewrite a pasted text ("rewrite it ...").
REWRITES = ["rewrite it so it sounds more professional", "turn it into a short, friendly social media post",
            "rewrite it for {aud}", "fix the grammar and punctuation in it without changing the meaning",
            "make it sound {tone}", "shorten it to about half its length", "turn it into a clear bulleted notice",
            "rewrite it as a text message to a friend", "rewrite it from the point of view of {name}"]


def _paste(r: random.Random, text: str) -> str:
    return r.choice([text, text, f'"{text}"', f"---\n{text}\n---", f'"""\n{text}\n"""'])


def passage(r: random.Random, rewrite: bool) -> Draft:
    """Extract from (``rewrite`` False) or rewrite a pasted text: the request before or after it."""
    kind = r.choice(sorted(PASSAGES))
    template, wants = PASSAGES[kind]
    text = fill(r, template.replace("{month2}", r.choice(["next month", "the quarter"])))
    above = r.random() < 0.3
    label = r.choice(["the text above", "this", "that text"] if above else
                     ["the text below", "this", "the following", "this text", "the passage below"])
    if rewrite:
        task = ask(r, pick(r, REWRITES).replace(" it", f" {label}", 1))
        why = ["I need a cleaner version by this afternoon.", "My {relative} wrote this and asked me to polish it.",
               "This is going on our website."]
        return _place(r, Draft(frame(r, why, p_role=0.3, p_why=0.4), task, "t"), text, above)
    task = ask(r, f"{r.choice(EXTRACT_ASKS).replace('{what}', r.choice(wants))} from {label}")
    return _place(r, Draft(frame(r, EXTRACT_WHY, p_role=0.3, p_why=0.4), task, "x"), text, above)


def _place(r: random.Random, d: Draft, text: str, above: bool) -> Draft:
    """The pasted text before the request (``above``) or after it, with an optional label."""
    if above:
        return Draft(d.frame, d.task, d.kind, head=_paste(r, text))
    lead = r.choice(["", "", "Here it is:", "Text:", "Here's the text:"])
    return Draft(d.frame, d.task, d.kind, tail=f"{lead}\n{_paste(r, text)}" if lead else _paste(r, text))


#: Humanities subjects with their article, capitalized (``facts.HISTORY_EVENTS`` is lower case).
HISTORY = ["the fall of the Berlin Wall", "the Black Death", "the building of the Panama Canal", "the Meiji Restoration",
           "the first Moon landing", "the French Revolution", "the end of apartheid in South Africa",
           "the Protestant Reformation", "the rise of the Mongol Empire", "the invention of the printing press",
           "the Industrial Revolution in Britain", "the Cuban Missile Crisis", "the women's suffrage movement"]
STEM_WHY = ["I'm studying for my exam on {day} and this part never made sense to me.",
            "My {age}-year-old asked me about it at dinner and I had no idea what to say.",
            "I'm preparing a {mins} presentation for my class.",
            "I've read the textbook chapter twice and I still don't get it.",
            "I need to explain it to a new colleague tomorrow."]


def _concept(r: random.Random, fields: tuple[str, ...]) -> str:
    return r.choice(m.CONCEPTS[r.choice(fields)])


def _s(concept: str) -> str:
    """The verb ending that agrees with ``concept`` ("enzymes work", "osmosis works")."""
    plural = concept.endswith("s") and not concept.endswith(("ss", "is", "us", "DNS", "GPS", "tectonics"))
    return "" if plural else "s"


def stem(r: random.Random) -> Draft:
    field = r.choice(["science", "technology", "health"])
    c = r.choice(m.CONCEPTS[field])
    vp = r.choice([
        f"explain how {c} work{_s(c)}", f"explain {c} to {{aud}}", f"help me understand {c}",
        f"explain the difference between {c} and {r.choice([x for x in m.CONCEPTS[field] if x != c])}",
        f"explain why {c} matter{_s(c)} in everyday life", f"walk me through {c} from the basics",
        f"give me an intuitive explanation of {c}",
    ])
    task = ask(r, fill(r, vp))
    if r.random() < 0.6:
        task += " " + pick(r, ["The part that confuses me is what actually happens step by step.",
                               "I know the definitions, just not the mechanism behind them.",
                               "Pretend I remember nothing from school.", "I'd like to be able to explain it to {aud} afterwards."])
    return Draft(frame(r, STEM_WHY, p_role=0.3, p_why=0.5), task, "n")


def humanities(r: random.Random) -> Draft:
    kind = r.randrange(5)
    if kind == 0:
        vp = f"explain the main causes and consequences of {r.choice(HISTORY)}"
    elif kind == 1:
        vp = f"write a short essay on {r.choice(m.ESSAY_SUBJECTS)}"
    elif kind == 2:
        a, b = r.sample(m.CONCEPTS[r.choice(["humanities", "economics"])], 2)
        vp = f"compare {a} and {b}"
    elif kind == 3:
        vp = f"explain why {{famous}} is still remembered today, and what {r.choice(['critics', 'historians'])} debate about them"
    else:
        vp = f"explain {_concept(r, ('humanities', 'economics'))} to {{aud}}"
    task = ask(r, fill(r, vp))
    if r.random() < 0.5:
        task += " " + r.choice(["I already know the basics, so go a bit deeper than a textbook summary.",
                                "I keep hearing different versions of this and want a balanced view.",
                                "I'd like to understand the reasoning, not just memorize facts."] +
                               (["I'm especially interested in how it affected ordinary people.",
                                 "Please don't just list dates; I want to understand why things happened."] if kind == 0 else []))
    why = ["I'm writing a paper on this for my {field} class.", "I'm a history buff but this period is new to me.",
           "We're discussing this in my book club on {day}.", "I teach {aud} and need a clear way to present it."]
    return Draft(frame(r, why, p_role=0.3, p_why=0.5), task, "u")


#: (what to plan, details the user adds).
PLANS = [
    ("plan a {n}-day trip to {city} for {group}", ["We'll be there in {month} and don't want to rent a car.",
                                                   "We love food markets and history but hate long queues.",
                                                   "It's our first time there, and we don't speak the language."]),
    ("make a {n}-week study plan for {exam}", ["I can study about {n} hours on weekdays and more on weekends.",
                                               "My weakest area is anything with formulas.",
                                               "I work part-time, so evenings are my main study time."]),
    ("put together a {n}-week workout plan for {who}", ["I have a gym nearby but have never used the machines.",
                                                        "I can only train at home with a pair of dumbbells.",
                                                        "I get bored quickly if every session is the same."]),
    ("plan a week of dinners for a family of four on ${grocery} or less", ["One of the kids won't eat anything green.",
                                                                         "We have about thirty minutes to cook on weekdays.",
                                                                         "I'd like to batch-cook on Sunday."]),
    ("help me plan a surprise birthday party for {name}", ["About {num} guests are coming, and we only have a small garden.",
                                                           "{name} is turning {num} and loves {topic}.",
                                                           "It has to stay secret until {weekday}."]),
    ("plan a one-day team offsite for {num} people", ["The goal is to rebuild trust after a tough quarter.",
                                                      "Half the team works remotely and rarely meets in person.",
                                                      "We have a meeting room in {town} for the day."]),
    ("plan a fundraiser for our school library", ["We want to raise about ${money} by the end of {month}.",
                                                  "Most parents are busy, so it can't need many volunteers."]),
    ("help me organize my week so I can study {n} hours a day and still work part-time",
     ["My shifts are in the evenings on {day} and {day2}.", "I keep losing track of time on my phone."]),
]
SITUATION_DETAILS = ["I've already tried a few things, but nothing has stuck.", "It's been going on for about {n} months.",
                     "I don't want to make things worse.", "Money is a bit tight right now.",
                     "My friends all give me different advice."]
GROUPS = ["two adults and a {age}-year-old", "a couple on a tight budget", "a solo traveler who loves museums",
          "four friends who like hiking", "my parents, who don't walk much"]
EXAMS = ["the SAT", "a university statistics exam", "a driving theory test", "a beginner {spoken} exam",
         "an organic chemistry final", "a job interview for a {job} role"]
TRAINEES = ["a beginner who can only train three times a week", "someone training for their first 10K",
            "a 60-year-old who wants to get stronger", "someone who works night shifts"]


def plan(r: random.Random) -> Draft:
    if r.random() < 0.3:
        sit = cap(r.choice(m.SITUATIONS)) + "."
        if r.random() < 0.6:
            sit += " " + pick(r, SITUATION_DETAILS)
        q = r.choice(["What should I do?", "What are my options?", "How would you approach this?",
                      "Can you help me think it through?", "Where do I even start?"])
        return Draft(frame(r, [], p_role=0.3), f"{sit} {q}", "a")
    vp, details = r.choice(PLANS)
    vp = vp.replace("{group}", r.choice(GROUPS)).replace("{exam}", r.choice(EXAMS)).replace("{who}", r.choice(TRAINEES))
    task = fill(r, f"{ask(r, vp)} {r.choice(details)}" if r.random() < 0.7 else ask(r, vp))
    costs = vp.startswith(("plan a", "help me plan a surprise"))  # trips, dinners, parties, offsites: a budget fits
    return Draft(frame(r, [], p_role=0.35), task, "l" if costs else "o")

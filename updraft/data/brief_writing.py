"""``brief`` requests for writing (emails, blog posts, stories, poems, speeches, product
descriptions, cover letters) and role play. Each generator takes a seeded ``random.Random``
and returns a ``Draft`` (``updraft.data.brief_base``); ``updraft.data.briefs`` adds the
constraints. Written for updraft; list order is part of set v5's contract.
"""

from __future__ import annotations

import random

from updraft.data import material as m
from updraft.data.brief_base import Draft, a_, ask, cap, fill, frame, pick

#: (what the email does, as "to ...", one sentence of background).
EMAILS = [
    ("ask my manager, {name}, for a one-week extension on the quarterly report",
     "Two of the data sources we rely on arrived late, and I don't want to send something half-finished."),
    ("politely decline a job offer from {company}",
     "I liked the team a lot, but I accepted another offer closer to home and I'd like to keep the door open."),
    ("ask my landlord to fix the heating in my apartment",
     "It has been broken for {n} days, I've already called twice, and the nights are getting cold."),
    ("follow up after an interview for a {job} position",
     "The interview was on {day} with {name} {surname}, and we talked a lot about {topic}."),
    ("invite my neighbors to a street party on {weekday}",
     "We're closing the street from 2 pm, everyone should bring one dish, and kids are very welcome."),
    ("remind a client that their invoice is {n} weeks overdue",
     "The invoice is for ${money}, and they have always paid on time before, so I don't want to sound accusatory."),
    ("apologize to my team for missing an important meeting on {day}",
     "I had a family emergency and didn't get a chance to tell anyone beforehand."),
    ("ask a former professor, Dr. {surname}, for a recommendation letter",
     "I took two of her classes {n} years ago and I'm applying to a master's program in {field}."),
    ("ask {company} for a refund on a new {item} that {defect}",
     "I bought it {n} weeks ago, and their chat support keeps sending me the same link."),
    ("welcome new members to our book club",
     "We meet on the first {day} of every month at the library, and this month we're reading a novel about {topic}."),
    ("introduce myself to my new team as their manager",
     "I'm joining from {company}, I start on {day}, and I want to set up one-on-one meetings with everyone."),
    ("ask my son's teacher, Ms. {surname}, for a meeting",
     "He has been struggling with his reading homework lately and seems anxious about going to school."),
    ("tell our customers that prices are going up by {pct}% next month",
     "Our costs have gone up a lot, but we're keeping free delivery and the loyalty discount."),
    ("thank {name}, who has volunteered at our food bank for {n} years",
     "She is moving to another city, and we want her to know how much her work meant to us."),
    ("ask my coworker {name} to stop booking meetings over my lunch break",
     "It has happened {n} times this month, and I don't want to damage a good working relationship."),
    ("tell the office that the kitchen will be closed for renovation",
     "It closes on {day} for about {n} weeks, and there will be a temporary coffee station on the second floor."),
]


def email(r: random.Random) -> Draft:
    what, why = r.choice(EMAILS)
    what, why = fill(r, what), fill(r, why)
    kind = r.choice(["an email", "a short email", "an email", "a message", "a polite email"])
    if r.random() < 0.5:
        task = f"{ask(r, f'write {kind} to {what}')} {why}"
    else:
        end = r.choice(["Can you write it for me?", "Could you draft it?", "What would you write?",
                        "Please draft something I can send.", "Can you help me word it?"])
        task = f"I need to {what}. {why} {end}"
    return Draft(frame(r, [], p_role=0.35), task, "e")


BLOG_FORMS = ["blog post", "newsletter article", "LinkedIn post", "article for our school magazine",
              "opinion piece for the local paper", "short guide for our website"]
BLOG_ANGLES = ["the mistakes beginners make and how to avoid them", "what has changed in the last ten years",
               "how to get started on a small budget", "the myths people still believe",
               "why it matters more than most people think", "what I wish someone had told me at the start",
               "practical tips people can try this weekend", "the surprising history behind it"]


def blog(r: random.Random) -> Draft:
    t, form, angle = r.choice(m.TOPICS), r.choice(BLOG_FORMS), r.choice(BLOG_ANGLES)
    task = ask(r, fill(r, f"write {a_(form)} about {t} for {{readers}}"))
    task += " " + r.choice([f"I want it to focus on {angle}.", f"The angle I have in mind is {angle}.",
                            f"Focus on {angle}.", f"It should cover {angle}."])
    why = ["I run a small blog about {topic}, and this is for next week's post.",
           "I write a monthly newsletter for {readers}.", "Our {shop} wants to post more useful content.",
           "My editor wants a draft by {day}."]
    return Draft(frame(r, why, p_role=0.3, p_why=0.5), task, "b")


STORY_KINDS = ["short story", "mystery story", "science fiction story", "bedtime story", "funny short story",
               "fairy tale", "gentle ghost story for kids", "adventure story", "short story for a writing class"]
STORY_EVENTS = [
    "finds a letter that was never sent", "loses their voice the day before a big performance",
    "discovers that a neighbor has been hiding something for years", "must deliver a package across town before midnight",
    "wakes up able to understand what animals say", "inherits a shop that nobody wants",
    "gets stuck in an elevator with a stranger", "finds a map drawn by their grandfather",
    "is the only one who notices that the clocks have stopped", "has to teach a class on a subject they know nothing about",
    "meets their younger self at a bus stop", "receives a package addressed to someone who died fifty years ago",
    "tries to win back a friend after a silly argument", "accidentally becomes famous overnight",
]
STORY_WHY = ["My {age}-year-old wants a new story every night, and I'm running out of ideas.",
             "I'm entering a short story contest, and this year's theme is '{theme}'.",
             "I teach a creative writing club and want an example to discuss with the group.",
             "I need something to read aloud at a family dinner."]
THEMES = ["second chances", "home", "the unexpected", "lost and found", "a small kindness", "the last day of summer"]


def story(r: random.Random) -> Draft:
    kind, event = r.choice(STORY_KINDS), r.choice(STORY_EVENTS)
    who = r.choice(m.PEOPLE + [f"a girl named {r.choice(m.NAMES)}", f"an old man named {r.choice(m.NAMES)}"])
    task = ask(r, f"write {a_(kind)} about {who} who {event}")
    if r.random() < 0.6:
        place = r.choice(m.PLACES)
        at = "on" if place.endswith(("island", "station", "autumn")) and "train" not in place else "in"
        task += " " + r.choice([f"Set it {at} {place}.", f"It should take place {at} {place}.", f"The setting is {place}."])
    why = [w.replace("{theme}", r.choice(THEMES)) for w in STORY_WHY]
    return Draft(frame(r, why, p_role=0.15, p_why=0.4), task, "s")


POEM_FORMS = ["sonnet", "short free-verse poem", "rhyming poem", "limerick", "sequence of three haiku", "ballad",
              "poem in four-line stanzas", "acrostic poem"]
POEM_SUBJECTS = [
    "my grandmother's garden", "the first snow of the year", "leaving home for college", "a rainy Monday morning",
    "an old dog who still loves walks", "the night shift at a hospital", "a city waking up", "the end of summer vacation",
    "a friendship that survived a long distance", "the sea in winter", "learning to ride a bike",
    "a kitchen full of people cooking together", "the smell of bread in the morning", "moving to a new country",
]
POEM_DETAILS = ["the smell of rain", "an old bicycle", "a kitchen radio", "a red umbrella", "the last train home",
                "a cup of tea going cold", "a handwritten note", "the sound of a screen door", "a streetlight"]
POEM_WHY = ["It's for my {relative}'s {ord} birthday card.", "I want to read it at our school's spring assembly.",
            "I host a poetry night at a café and want something to open the evening.",
            "It's a gift for my {relative}, who is going through a hard time.", "It's for a class assignment."]


def poem(r: random.Random) -> Draft:
    form = r.choice(POEM_FORMS)
    subject = r.choice(POEM_SUBJECTS + [r.choice(m.TOPICS)])
    if form == "acrostic poem":
        form = f"acrostic poem that spells out {r.choice(m.NAMES).upper()}"
    task = ask(r, f"write {a_(form)} about {subject}")
    if r.random() < 0.5:
        task += " " + r.choice([f"I'd love it if it mentioned {r.choice(POEM_DETAILS)} somewhere.",
                                f"Somewhere in it, include {r.choice(POEM_DETAILS)}.",
                                f"One image I'd like in it: {r.choice(POEM_DETAILS)}."])
    fixed = form.startswith(("sonnet", "limerick", "sequence", "acrostic"))  # their own length, rhyme and lines
    return Draft(frame(r, POEM_WHY, p_role=0.1, p_why=0.55), task, "y" if fixed else "v")


SPEECHES = [
    "a toast for my sister {name}'s wedding", "a retirement speech for my colleague {name}, who has worked here for {num} years",
    "a welcome speech for new volunteers at our community garden", "a graduation speech for a small high school class",
    "a short speech to open our town's {topic} festival", "an acceptance speech for a local award for my work in {field}",
    "a kickoff speech for my team at the start of a big project", "a farewell speech for my last day at {company}",
    "a speech for my best friend's {ord} birthday party", "a speech asking the city council to fund more {topic} programs",
    "a eulogy for my {relative}, who loved {topic}",
]
SPEECH_DETAILS = ["The audience will be about {num} people, mostly {readers}.",
                  "I'm not a confident speaker, so short sentences would really help.",
                  "I'd like to mention how {name} helped me in my first year.", "It will be the first speech of the evening.",
                  "Some people in the audience won't know me at all."]


def speech(r: random.Random) -> Draft:
    task = ask(r, fill(r, f"{r.choice(['write', 'draft', 'put together'])} {r.choice(SPEECHES)}"))
    if r.random() < 0.85:
        task += " " + pick(r, SPEECH_DETAILS)
    return Draft(frame(r, [], p_role=0.25), task, "h")


#: (product, features) for product descriptions.
PRODUCTS = [
    ("a handmade ceramic mug", ["holds 350 ml", "is dishwasher-safe", "comes in {k} glazes", "is made in a small studio in {town}"]),
    ("a solar-powered phone charger", ["charges a phone twice on a full battery", "folds to the size of a paperback",
                                       "is water-resistant", "weighs {num}0 grams"]),
    ("an insulated water bottle", ["keeps drinks cold for 24 hours", "has a leak-proof lid", "is made from recycled steel",
                                   "fits in a car cup holder"]),
    ("a beginner's watercolor kit", ["includes {num} colors", "comes with three brushes", "has a pad of thick paper",
                                     "fits in a small tin"]),
    ("a smart plant sensor", ["measures light, water and temperature", "sends alerts to your phone",
                              "runs for a year on one battery", "works with over 2,000 plant types"]),
    ("a foldable electric scooter", ["has a range of {num} km", "folds in three seconds", "has front and rear lights",
                                     "weighs 12 kg"]),
    ("a children's picture book about {topic}", ["is written for ages {age} to 8", "has {num} illustrated pages",
                                                "includes a short quiz at the end", "is printed on recycled paper"]),
    ("a noise-cancelling sleep mask", ["has built-in flat speakers", "is machine-washable", "blocks all light",
                                       "has a battery that lasts {n} nights"]),
    ("a weekly meal-planning notebook", ["has 52 two-page spreads", "includes a tear-off shopping list",
                                         "lies flat when open", "has a pocket for recipes"]),
    ("a wooden desk organizer", ["is made from oak offcuts", "has a slot for a phone", "has {n} compartments",
                                 "needs no assembly"]),
]
PRODUCT_PLACES = ["our online store", "an Etsy listing", "a Kickstarter page", "the back of the box",
                  "a marketplace listing", "our spring catalog"]


def product(r: random.Random) -> Draft:
    name, feats = r.choice(PRODUCTS)
    chosen = r.sample(feats, r.randint(2, 3))
    task = ask(r, f"write a product description for {name} for {r.choice(PRODUCT_PLACES)}")
    task += " " + r.choice(["Key features: it ", "The main selling points are that it ", "Some details: it "])
    task += ", ".join(chosen[:-1]) + f"{',' if len(chosen) > 2 else ''} and {chosen[-1]}."
    why = ["I'm launching my first product online.", "Our small company is about to release this.",
           "The current description is boring and nobody clicks on it."]
    return Draft(frame(r, why, p_role=0.15, p_why=0.5), fill(r, task), "g")


BACKGROUNDS = ["I have {n} years of experience in customer service and I'm good at calming people down.",
               "I just graduated with a degree in {field} and this would be my first full-time job.",
               "I'm changing careers after {n} years as a {job}.", "I've been freelancing for {n} years and want something stable.",
               "I led a project that cut our team's response time by {pct}%.",
               "I organized a charity run last year that raised ${money}."]


def cover_letter(r: random.Random) -> Draft:
    job = r.choice([f"a {j} position at {{company}}" for j in ["junior data analyst", "barista", "research assistant",
                                                              "customer support specialist", "junior web developer",
                                                              "project coordinator", "library assistant", "bookkeeper"]])
    task = ask(r, f"write a cover letter for {job}")
    task += " " + " ".join(fill(r, b) for b in r.sample(BACKGROUNDS, r.randint(1, 2)))
    return Draft("", fill(r, task), "e")


#: Role-play set-ups (filled; ``{persona}`` etc. from ``brief_base.VALUES``).
SCENES = [
    "pretend you are {persona}. I'm a {visitor} who has just arrived, and I'd like you to tell me about {topic}",
    "act as a hiring manager at {company} and interview me for a {job} position",
    "act as a patient {spoken} tutor and help me practice ordering food in a restaurant. I'm a beginner",
    "play {famous}. I'm a student writing a report, and I'll ask you about your life and work",
    "be a customer support agent at {company}. I'm a customer whose {item} {defect}, and I'm pretty annoyed",
    "play a tour guide in {city} and take me on a walking tour of the old town",
    "imagine you're {persona} and I'm {person} who has come to you for advice about {topic}",
    "be my debate partner. You argue that {claim}, and I'll argue against it",
    "pretend you're a detective and I'm a witness to a {crime} at {place}. Question me about what I saw",
    "act as a landlord showing me an apartment. I'm a tenant with a lot of questions about noise, rent and repairs",
    "pretend to be a nervous first-time pilot making announcements on a long flight",
    "be {persona} giving a short speech to {readers} about {topic}",
]
VISITORS = ["curious visitor", "new apprentice", "journalist", "lost traveler", "student on a school trip"]
CLAIMS = ["homework should be banned in primary schools", "cities should make public transport free",
          "social media does more harm than good", "every student should learn to code", "zoos should be closed",
          "a four-day work week is better for everyone", "tipping in restaurants should be abolished"]
CRIMES = ["stolen painting", "missing birthday cake", "broken shop window", "mysterious power cut", "vanished parrot"]
ROLEPLAY_GOALS = ["I want to get better at thinking on my feet.", "Make it feel like a real conversation, not a quiz.",
                  "My goal is to sound more natural and less rehearsed.", "Be a bit difficult, so it's realistic.",
                  "Let me lead the conversation after your first message."]
ROLEPLAY_WHY = ["I'm practicing for a real conversation next week.", "I'm a teacher and want to try this with my class.",
                "This is just for fun.", "I want to get more comfortable speaking up."]


def roleplay(r: random.Random) -> Draft:
    scene = r.choice(SCENES)
    scene = scene.replace("{visitor}", r.choice(VISITORS)).replace("{claim}", r.choice(CLAIMS))
    scene = fill(r, scene.replace("{crime}", r.choice(CRIMES)))
    lead = r.choice(["", "", "Let's do a role play: ", "Let's play a game. ", "I want to try something: "])
    task = f"{lead}{cap(scene)}." if lead.endswith(". ") or not lead else f"{lead}{scene}."
    if r.random() < 0.5:
        task += " " + r.choice(ROLEPLAY_GOALS)
    return Draft(frame(r, ROLEPLAY_WHY, p_role=0.15, p_why=0.35), task, "p")

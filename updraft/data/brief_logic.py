"""``brief`` requests for reasoning puzzles, math word problems (every number drawn, the
problem consistent) and coding tasks specified in prose (function name, inputs, edge cases).
Each generator returns a ``Draft`` (``updraft.data.brief_base``). Written for updraft; list
order is part of set v5's contract.
"""

from __future__ import annotations

import random

from updraft.data import material as m
from updraft.data.brief_base import Draft, ask, fill, frame, join_and, pick

#: (what the people did, "X ... Y" relation, its converse, the question).
ORDERINGS = [
    ("ran a race", "finished ahead of", "finished behind", "Who finished first, and who came last?"),
    ("are waiting in line at a bakery", "is ahead of", "is behind", "Who is at the front of the line?"),
    ("are of different heights", "is taller than", "is shorter than", "Who is the tallest, and who is the shortest?"),
    ("arrived at a party at different times", "arrived before", "arrived after", "In what order did they arrive?"),
    ("scored different points in a quiz", "scored more than", "scored fewer than", "Rank them from highest to lowest."),
]
NONSENSE = ["bloops", "razzies", "lazzles", "grommets", "wibbles", "tovs", "zinkers", "morks"]
ESTIMATES = ["how many piano tuners work in a city of {num}0,000 people", "how many tennis balls would fit in a school bus",
             "how many liters of water a person drinks in a lifetime", "how many words a typical person speaks in a year",
             "how many pizzas are eaten in {country} on a typical Friday night", "how many windows there are in {city}",
             "how many heartbeats a person has by the age of {num}", "how long it would take to walk around the equator"]


def _ordering(r: random.Random) -> str:
    what, rel, inv, question = r.choice(ORDERINGS)
    people = r.sample(m.NAMES, r.randint(4, 5))
    clues = [f"{a} {rel} {b}." if r.random() < 0.6 else f"{b} {inv} {a}." for a, b in zip(people, people[1:])]
    r.shuffle(clues)
    return f"{join_and(r, sorted(people))} {what}. {' '.join(clues)} {question}"


def _knights(r: random.Random) -> str:
    a, b, c = r.sample(m.NAMES, 3)
    said, who = r.choice([
        (f'{a} says, "{b} is a knave." {b} says, "{a} and I are both knights."', f"{a} and {b}"),
        (f'{a} says, "We are both knaves." {b} says nothing.', f"{a} and {b}"),
        (f'{a} says, "{b} and {c} are the same kind." {b} says, "{c} is a knave." {c} says, "{a} is a knight."',
         f"{a}, {b} and {c}"),
        (f'{a} says, "At least one of us is a knave." {b} says, "{a} is telling the truth."', f"{a} and {b}"),
    ])
    return f"On an island, knights always tell the truth and knaves always lie. {said} What are {who}?"


def _schedule(r: random.Random) -> str:
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
    people, target = r.sample(m.NAMES, 3), r.choice(days)
    lines = []
    for p in people:
        free = sorted({target, *r.sample(days, 2)}, key=days.index)
        lines.append(f"{p} is free on {join_and(r, free)}")
    return (f"{people[0]}, {people[1]} and {people[2]} need a one-hour meeting this week. {'; '.join(lines)}. "
            "Which days work for everyone?")


def _sequence(r: random.Random) -> str:
    a, d = r.randint(1, 9), r.randint(2, 7)
    seq = r.choice([[a + d * i for i in range(5)], [a * d**i for i in range(5)], [i * i + a for i in range(1, 6)],
                    [a + d * i * (i + 1) // 2 for i in range(5)]])
    return f"What number comes next in the sequence {', '.join(map(str, seq))}? Explain the rule."


def reasoning(r: random.Random) -> Draft:
    kind = r.randrange(8)
    if kind == 0:
        task = _ordering(r)
    elif kind == 1:
        task = _knights(r)
    elif kind == 2:
        task = _schedule(r)
    elif kind == 3:
        task = _sequence(r)
    elif kind == 4:
        x, y, z = r.sample(NONSENSE, 3)
        task = (f"If all {x} are {y}, and some {y} are {z}, does it follow that some {x} are {z}? "
                "Explain why or why not, and give a counterexample if it doesn't.")
    elif kind == 5:
        task = ask(r, pick(r, [f"estimate {e}" for e in ESTIMATES]))
    elif kind == 6:
        n = r.choice([8, 9, 12, 27])
        task = (f"You have {n} coins that look identical, but one is slightly heavier than the others. Using a balance "
                "scale, what is the smallest number of weighings that guarantees you find the heavy coin?")
    else:
        s1, s2 = r.randint(48, 70), r.randint(52, 80)
        task = (f"I have two job offers. One pays ${s1},000 a year with a {r.choice([25, 40, 50, 70])}-minute commute each way; "
                f"the other pays ${s2},000 and is fully remote, but with {r.choice(['no', 'fewer', 'vague'])} promotion prospects. "
                "Help me reason through which one is the better choice.")
    why = ["This was a brain teaser at work and we can't agree on the answer.", "I'm preparing for a logic test.",
           "My {relative} sent me this and I'm stuck.", "I want to check my own reasoning."]
    if kind >= 5:  # estimates, the coin puzzle, the user's own decision: no "sent me this" framing
        return Draft(frame(r, [], p_role=0.15), task, "q")
    return Draft(frame(r, why, p_role=0.1, p_why=0.35), task, "q")


def _math_problem(r: random.Random) -> str:
    """A word problem with drawn numbers; some are the user's own (first person), some textbook-style."""
    kind = r.randrange(10)
    if kind == 0:
        g, v, c, pct = r.randint(20, 80), r.choice([300, 450, 600, 900]), r.choice([12, 15, 18, 22, 25]), r.choice([10, 15, 20])
        return (f"I'm organizing a party for {g} people. The venue costs ${v}, catering is ${c} per person, and I want a "
                f"{pct}% buffer on top. What's the total budget, and how much is that per guest?")
    if kind == 1:
        s, fl, mk, eggs, want = r.choice([4, 6, 8]), r.choice([200, 250, 300]), r.choice([150, 240, 300]), r.randint(2, 4), r.choice([10, 12, 15, 18])
        return (f"A recipe for {s} servings uses {fl} g of flour, {mk} ml of milk and {eggs} eggs. I need to make {want} servings. "
                "How much of each ingredient do I need, and how should I round the eggs?")
    if kind == 2:
        d, use, price, k = r.choice([180, 240, 320, 450]), r.choice([5.5, 6, 7.5, 8]), r.choice([1.6, 1.75, 1.9]), r.randint(2, 5)
        return (f"My friends and I are driving {d} km to the coast and back. The car uses {use} liters per 100 km, fuel costs "
                f"${price} per liter, and we're splitting it {k} ways. How much does each of us pay for fuel?")
    if kind == 3:
        have, per, goal, more = r.choice([300, 800, 1500]), r.choice([120, 150, 220, 250]), r.choice([3000, 4500, 6000]), r.choice([30, 50, 80])
        return (f"I have ${have} saved and put away ${per} a month. My goal is ${goal}. How many months will it take, and "
                f"how much sooner would I get there if I saved ${more} more each month?")
    if kind == 4:
        ln, w, h, cover = r.randint(3, 6), r.randint(3, 5), r.choice([2.4, 2.5, 2.7]), r.choice([8, 10, 12])
        return (f"I'm painting a room that is {ln} m by {w} m with walls {h} m high. The door and window take up about 4 square "
                f"meters, one liter of paint covers {cover} square meters, and I want two coats. Paint comes in 2.5-liter cans. "
                "How many cans should I buy?")
    if kind == 5:
        red, blue = r.randint(3, 8), r.randint(3, 8)
        return (f"A bag has {red} red marbles and {blue} blue marbles. I take out two without looking, without putting the "
                "first one back. What is the probability that both are the same color?")
    if kind == 6:
        a, b = r.choice([3, 4, 5, 6]), r.choice([4, 6, 8, 10, 12])
        x, y = r.sample(m.NAMES, 2)
        return (f"{x} can paint a fence alone in {a} hours, and {y} can do it alone in {b} hours. If they work together, "
                "how long will it take them? Give the answer in hours and minutes.")
    if kind == 7:
        p, rate, t = r.choice([1000, 2500, 5000, 10000]), r.choice([3, 4, 5, 6]), r.choice([5, 8, 10, 15])
        return (f"If I invest ${p} at {rate}% interest per year for {t} years, how much more do I end up with when the "
                "interest is compounded annually instead of simple interest?")
    if kind == 8:
        d, s1, s2 = r.choice([300, 420, 540]), r.choice([60, 70, 80]), r.choice([90, 100, 110])
        return (f"Two trains leave cities {d} km apart at the same time, heading toward each other at {s1} km/h and {s2} km/h. "
                "When do they meet, and how far from the first city?")
    scores = [r.randint(62, 95) for _ in range(r.randint(3, 5))]
    target = r.choice([80, 85, 88, 90])
    return (f"My test scores so far are {', '.join(map(str, scores))}. What score do I need on the next test to bring my "
            f"average up to {target}, and is that even possible if the maximum is 100?")


def math(r: random.Random) -> Draft:
    task = _math_problem(r)
    if task.startswith(("I ", "I'm ", "My ")):  # the user's own problem: no homework framing
        return Draft(frame(r, [], p_role=0.15), task, "m")
    why = ["My {age}th grader brought this home and I'm embarrassed that I can't do it.", "I'm studying for a math test.",
           "This came up in a quiz night and nobody could agree.", "I'm tutoring a student and want a clear model answer."]
    return Draft(frame(r, why, p_role=0.1, p_why=0.4), task, "m")


#: (name, what it takes, what it does, edge cases) of functions specified in prose.
FUNCTIONS = [
    ("parse_duration", "a string such as '1h30m' or '45s'", "returns the total number of seconds",
     ["an empty string", "upper-case units", "a number with no unit"]),
    ("free_slots", "two people's meetings as lists of (start, end) times", "returns the times both are free between 9 and 17",
     ["overlapping meetings", "a meeting that ends exactly when another starts", "an empty calendar"]),
    ("top_words", "a block of text and an integer k", "returns the k most common words with their counts",
     ["punctuation attached to words", "mixed case", "k larger than the number of distinct words"]),
    ("password_problems", "a password", "returns a list of the rules it breaks (at least 12 characters, a digit, "
     "an upper-case letter and a symbol)", ["an empty string", "spaces", "non-ASCII letters"]),
    ("split_bill", "a total, a tip percentage and a list of names", "returns what each person pays, rounded to cents so "
     "that the shares add up exactly to the total", ["a single person", "a zero tip", "totals that don't divide evenly"]),
    ("normalize_phone", "a phone number typed in any common format", "returns it as +1-555-123-4567",
     ["extra spaces and dashes", "a leading country code", "too few digits"]),
    ("rolling_max", "a list of numbers and a window size", "returns the maximum of every window",
     ["a window larger than the list", "negative numbers", "a window size of 1"]),
    ("group_anagrams", "a list of words", "groups together the words that are anagrams of each other",
     ["upper and lower case", "duplicate words", "an empty list"]),
    ("next_business_day", "a date and a set of holidays", "returns the next weekday that is not a holiday",
     ["a Friday", "a holiday on a Monday", "the last day of the year"]),
    ("flatten_dict", "a nested dictionary", "returns a flat dictionary whose keys are joined with dots, like 'a.b.c'",
     ["empty nested dictionaries", "keys that already contain dots", "lists as values"]),
    ("compress_ranges", "a sorted list of integers", "returns a string like '1-3, 5, 7-9'",
     ["an empty list", "a single number", "duplicates"]),
    ("parse_log_line", "one line of a web server log", "returns the IP address, timestamp, method, path and status code",
     ["malformed lines", "IPv6 addresses", "missing fields"]),
    ("restock_list", "a dictionary of item names to stock counts and a threshold",
     "returns the items that need reordering, most urgent first", ["negative counts", "an empty inventory", "ties"]),
    ("caesar_shift", "a message and a shift", "encrypts it with a Caesar cipher, keeping punctuation and case",
     ["negative shifts", "shifts larger than 26", "digits and symbols"]),
    ("longest_streak", "a list of dates on which a user logged in", "returns the longest run of consecutive days",
     ["unsorted dates", "the same date twice", "an empty list"]),
    ("weighted_grade", "a list of scores and a list of weights", "returns the weighted average and a letter grade",
     ["weights that don't add up to 1", "lists of different lengths", "empty lists"]),
    ("shortest_path", "a grid of open and blocked cells, a start and a goal",
     "returns the length of the shortest path moving up, down, left or right",
     ["no path at all", "the start equal to the goal", "a blocked start cell"]),
    ("slugify", "a blog post title", "turns it into a URL slug", ["accented letters", "repeated spaces and symbols",
                                                                   "a title that is only punctuation"]),
]
#: (file, columns, what the script does).
SCRIPTS = [
    ("sales.csv", "date, region, product and amount", "prints the total sales per region for each month"),
    ("students.csv", "name, class and scores in math, science and English", "finds the top student in each class"),
    ("expenses.csv", "date, category, description and amount", "shows how much I spent per category, biggest first"),
    ("readings.csv", "timestamp, sensor_id and temperature", "flags readings more than 3 degrees from that sensor's daily average"),
    ("orders.csv", "order_id, customer, items and total", "lists the customers whose average order is above $100"),
]
CLASSES = [("library", "adding books, checking them out and returning them, with a fee for late returns"),
           ("shopping cart", "adding and removing items, applying one discount code and computing the total with tax"),
           ("parking garage", "cars entering and leaving, counting free spaces per floor and charging by the hour"),
           ("to-do list", "adding tasks with due dates, marking them done and listing the overdue ones")]


def coding(r: random.Random) -> Draft:
    kind = r.randrange(5)
    lang = r.choice(["Python"] * 4 + (m.LANGUAGES if kind <= 2 else ["JavaScript", "Ruby", "Go"] if kind == 3 else
                                      ["Java", "C++", "C#", "TypeScript", "Ruby"]))
    if kind <= 2:
        name, takes, does, edges = r.choice(FUNCTIONS)
        task = ask(r, f"write a {lang} function called {name} that takes {takes} and {does}")
        edge = r.sample(edges, r.randint(2, 3))
        task += " " + r.choice([f"It should handle {join_and(r, edge)}.", f"Think about edge cases like {join_and(r, edge)}.",
                                f"Make sure it doesn't break on {join_and(r, edge)}."])
    elif kind == 3:
        file, cols, does = r.choice(SCRIPTS)
        task = f"I have a file called {file} with the columns {cols}. {ask(r, f'write a {lang} script that {does}')}"
    else:
        thing, ops = r.choice(CLASSES)
        task = ask(r, f"write a {lang} class for a {thing} that supports {ops}")
    why = [f"I'm learning {lang} and want to see how an experienced developer would do this.",
           "This is for a small internal tool at work.", "I have a coding interview on {day} and want to practice.",
           "My current version is a mess and I'd like to start over."]
    return Draft(frame(r, why, p_role=0.1, p_why=0.45), fill(r, task), "c")

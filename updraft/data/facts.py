"""Word lists for the evaluation-style prompt generators (``updraft.data.styles``), written for
updraft: factual-question subjects, short-instruction material, made-up news events, inline
texts to extract from, and Python function stubs with doctests.

Nothing here comes from a dataset; the EAGLE evaluation sets are never read to build them (their
styles -- short factual questions, one-line instructions, "summarise this article", "complete
this function" -- were described in words, not copied).
"""

from __future__ import annotations

COUNTRIES = [
    "France", "Japan", "Brazil", "Kenya", "Canada", "Australia", "India", "Egypt", "Mexico", "Norway",
    "Argentina", "Vietnam", "Turkey", "Peru", "Ghana", "Portugal", "Thailand", "Poland", "Chile", "Morocco",
    "New Zealand", "South Korea", "Ireland", "Greece", "Nigeria", "Sweden", "Indonesia", "Colombia",
    "Spain", "Italy", "Germany", "China", "Russia", "Iceland", "Finland", "Cuba", "Jamaica", "Nepal",
    "Ethiopia", "Tanzania", "Saudi Arabia", "Iran", "Pakistan", "Bangladesh", "the Philippines", "Malaysia",
]

#: "What is the {x} of {country}?"
COUNTRY_FACTS = [
    "capital", "official language", "currency", "population", "largest city", "highest mountain",
    "longest river", "national animal", "national dish", "flag", "main export", "form of government",
]

PEOPLE_FAMOUS = [
    "Marie Curie", "Isaac Newton", "Leonardo da Vinci", "Cleopatra", "Nelson Mandela", "Albert Einstein",
    "Frida Kahlo", "Charles Darwin", "Ada Lovelace", "Napoleon Bonaparte", "Mahatma Gandhi", "Galileo Galilei",
    "William Shakespeare", "Amelia Earhart", "Nikola Tesla", "Florence Nightingale", "Confucius", "Mozart",
]

LANDMARKS = [
    "the Eiffel Tower", "Machu Picchu", "the Taj Mahal", "the Colosseum", "Angkor Wat", "the Statue of Liberty",
    "Stonehenge", "the Sydney Opera House", "Petra", "the Golden Gate Bridge", "Mount Kilimanjaro",
    "the Grand Canyon", "the Acropolis", "Victoria Falls", "the Great Barrier Reef", "Chichen Itza",
]

INVENTIONS = [
    "the telephone", "the light bulb", "the printing press", "the steam engine", "the airplane", "the radio",
    "the television", "penicillin", "the World Wide Web", "the bicycle", "the microwave oven", "the compass",
    "the transistor", "the camera", "the refrigerator", "the typewriter", "the jet engine", "the barcode",
]

BOOKS = [
    "pride and prejudice", "moby dick", "the odyssey", "war and peace", "don quixote", "hamlet",
    "the great gatsby", "frankenstein", "one hundred years of solitude", "the little prince",
    "to kill a mockingbird", "the hobbit", "crime and punishment", "jane eyre", "the divine comedy",
]

ELEMENTS = ["gold", "iron", "oxygen", "sodium", "helium", "carbon", "silver", "lead", "mercury", "copper", "neon", "zinc"]

PLANETS = ["Mercury", "Venus", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"]

ANIMALS = [
    "an octopus", "a spider", "a honeybee", "a giraffe", "a blue whale", "a cheetah", "a penguin", "a camel",
    "an elephant", "a shark", "a hummingbird", "a snail", "a bat", "a kangaroo", "a starfish", "an owl",
]

HISTORY_EVENTS = [
    "the fall of the berlin wall", "the first moon landing", "the signing of the magna carta",
    "the french revolution", "the battle of waterloo", "the sinking of the titanic", "the end of world war ii",
    "the first olympic games of the modern era", "the building of the panama canal", "the black death",
    "the invention of writing", "the first transatlantic flight", "the opening of the suez canal",
]

FIELDS = [
    "modern physics", "computer science", "genetics", "psychology", "economics", "geometry", "medicine",
    "chemistry", "sociology", "astronomy", "evolution", "democracy", "philosophy", "microbiology",
]

ACRONYMS = ["NASA", "UNESCO", "DNA", "GPS", "HTML", "UNICEF", "WHO", "CPU", "NATO", "USB", "RAM", "LED", "PDF", "FIFA"]

SPORTS = ["football", "cricket", "rugby", "basketball", "tennis", "golf", "baseball", "hockey", "cycling"]

ROLES = [
    "president of the united states", "person to climb mount everest", "woman to win a nobel prize",
    "person in space", "emperor of rome", "person to sail around the world", "prime minister of india",
]

# ---- short instructions ----------------------------------------------------------------------
ADJECTIVES = [
    "happy", "brave", "quick", "ancient", "fragile", "generous", "curious", "bright", "calm", "enormous",
    "honest", "clever", "gloomy", "rare", "silent", "stubborn", "gentle", "fierce", "humble", "vivid",
]

VERBS_PAST = ["painted", "repaired", "delivered", "cooked", "wrote", "sold", "cleaned", "built", "found", "borrowed"]

OBJECTS = [
    "the old fence", "a birthday cake", "the letter", "a wooden boat", "the kitchen", "a small garden",
    "the report", "a new bicycle", "the broken clock", "a painting of the sea", "the map", "a warm scarf",
]

TIMES = ["yesterday", "last week", "on Monday", "before dinner", "in the morning", "after school", "during the storm"]

BUSINESSES = [
    "a bakery", "a bike repair shop", "an online bookstore", "a dog grooming service", "a coffee truck",
    "a language school", "a plant nursery", "a yoga studio", "a recycling startup", "a family restaurant",
    "a music app", "a budget airline", "a cleaning company", "a board game cafe",
]

GOALS = [
    "save energy at home", "make a commute more pleasant", "improve a morning routine", "reduce food waste",
    "stay focused while studying", "make new friends as an adult", "keep a houseplant alive", "save money on groceries",
    "learn vocabulary faster", "be more productive on Mondays", "sleep better", "drink more water",
]

UNITS = [("kilometers", "miles"), ("pounds", "kilograms"), ("liters", "gallons"), ("inches", "centimeters"),
         ("hours", "minutes"), ("degrees Celsius", "degrees Fahrenheit"), ("meters", "feet")]

GROUPS = [
    (["apple", "carrot", "banana", "broccoli", "mango", "spinach"], "fruits or vegetables"),
    (["dog", "lizard", "whale", "snake", "bat", "turtle"], "mammals or reptiles"),
    (["oak", "rose", "pine", "tulip", "maple", "daisy"], "trees or flowers"),
    (["guitar", "drum", "violin", "trumpet", "flute", "piano"], "string, wind or percussion instruments"),
    (["Paris", "Nile", "Tokyo", "Amazon", "Cairo", "Danube"], "cities or rivers"),
]

# ---- made-up news events (stage one of the summarisation tasks) ------------------------------
CITIES = [
    "Riverton", "Lakeside", "Port Ellis", "Maple Hill", "Northbridge", "Eastwood", "Stonehaven", "Greenfield",
    "Harbor City", "Millbrook", "Westfield", "Cedar Falls", "Brighton Bay", "Oakdale", "Silverton", "Fairview",
]

ORGS = [
    "the city council", "a regional hospital", "a local tech startup", "the state university", "the fire department",
    "a football club", "a national bank", "the public library", "an environmental charity", "a car manufacturer",
    "the transport authority", "a children's museum", "the weather service", "a farming cooperative",
]

EVENTS = [
    "announced a plan to build {n} new homes near the old railway yard",
    "reported that a storm damaged {n} buildings overnight",
    "opened a new research center that will employ {n} people",
    "was fined {n} thousand dollars after a chemical leak into a river",
    "celebrated its {n}th anniversary with a free festival",
    "rescued {n} hikers trapped by a flash flood",
    "voted to ban cars from the town center on weekends",
    "launched a pilot program that gives free bus passes to {n} students",
    "found a {n}-year-old shipwreck during a routine survey",
    "won a national award for cutting energy use by {n} percent",
    "announced that it will close {n} branches by the end of the year",
    "recorded the hottest day in {n} years",
    "agreed a merger worth {n} million dollars with a rival firm",
    "reopened a historic bridge after {n} months of repairs",
    "discovered a rare species of frog in a nearby wetland",
    "held a marathon in which {n} runners took part",
]

# ---- inline texts to extract from (extraction prompts carry their own text) ------------------
COMPANIES = ["Northwind Labs", "Bluepeak Foods", "Orbit Motors", "Greenline Energy", "Quill Publishing",
             "Harbor Logistics", "Pixelworks", "Sunfield Farms", "Atlas Robotics", "Crescent Health"]

PRODUCTS = ["wireless earbuds", "a robot vacuum", "a standing desk", "a coffee grinder", "a fitness tracker",
            "a camping tent", "an e-reader", "a blender", "a smart thermostat", "a backpack"]

REVIEW_PHRASES = [
    "works better than I expected", "stopped working after two weeks", "is good value for the price",
    "arrived late and the box was damaged", "is noisy but does the job", "has a battery that lasts for days",
    "is too heavy to carry around", "looks great on my desk", "was easy to set up", "feels cheaply made",
]

# ---- Python stubs: (signature, docstring body), tasks written for updraft --------------------
PY_STUBS = [
    ("def longest_run(xs: list) -> int:", "Return the length of the longest run of equal consecutive items in xs.\n    >>> longest_run([1, 1, 2, 2, 2, 3])\n    3\n    >>> longest_run([])\n    0"),
    ("def dedupe_keep_order(items: list) -> list:", "Remove repeated items, keeping the first occurrence of each.\n    >>> dedupe_keep_order([3, 1, 3, 2, 1])\n    [3, 1, 2]"),
    ("def merge_intervals(intervals: list) -> list:", "Merge overlapping [start, end] intervals and return them sorted by start.\n    >>> merge_intervals([[1, 3], [2, 6], [8, 10]])\n    [[1, 6], [8, 10]]"),
    ("def count_islands(grid: list) -> int:", "Count the groups of 1s in a grid of 0s and 1s (cells touching up, down,\n    left or right belong to the same group).\n    >>> count_islands([[1, 1, 0], [0, 0, 1], [1, 0, 1]])\n    3"),
    ("def initials(full_name: str) -> str:", "Return the capitalised initials of a name, each followed by a dot.\n    >>> initials('ada lovelace')\n    'A.L.'"),
    ("def is_isogram(word: str) -> bool:", "Return True if no letter repeats in word, ignoring case and hyphens.\n    >>> is_isogram('lumber-jack')\n    True\n    >>> is_isogram('Alpha')\n    False"),
    ("def chunk_string(s: str, n: int) -> list:", "Split s into pieces of n characters; the last piece may be shorter.\n    >>> chunk_string('abcdefg', 3)\n    ['abc', 'def', 'g']"),
    ("def digital_root(n: int) -> int:", "Repeatedly sum the digits of n until a single digit remains.\n    >>> digital_root(493193)\n    2"),
    ("def pairwise_diffs(xs: list) -> list:", "Return the differences between consecutive items of xs.\n    >>> pairwise_diffs([3, 7, 4])\n    [4, -3]"),
    ("def zigzag_case(s: str) -> str:", "Alternate upper and lower case, starting with upper case.\n    >>> zigzag_case('hello')\n    'HeLlO'"),
    ("def median(xs: list) -> float:", "Return the median of a non-empty list of numbers.\n    >>> median([3, 1, 2])\n    2\n    >>> median([4, 1, 2, 3])\n    2.5"),
    ("def top_k_words(text: str, k: int) -> list:", "Return the k most frequent lowercase words of text; ties in alphabetical order.\n    >>> top_k_words('b a b c a b', 2)\n    ['b', 'a']"),
    ("def spiral_order(matrix: list) -> list:", "Return the items of a rectangular matrix in clockwise spiral order.\n    >>> spiral_order([[1, 2], [3, 4]])\n    [1, 2, 4, 3]"),
    ("def count_primes_below(n: int) -> int:", "Count the prime numbers smaller than n.\n    >>> count_primes_below(10)\n    4"),
    ("def is_valid_time(s: str) -> bool:", "Return True if s is a valid 24-hour time written as HH:MM.\n    >>> is_valid_time('23:59')\n    True\n    >>> is_valid_time('24:00')\n    False"),
    ("def collatz_steps(n: int) -> int:", "Count the steps of the Collatz process (halve if even, else 3n + 1) until n is 1.\n    >>> collatz_steps(6)\n    8"),
    ("def parse_key_values(s: str) -> dict:", "Parse 'key=value' pairs separated by semicolons into a dict of strings.\n    >>> parse_key_values('a=1;b=2')\n    {'a': '1', 'b': '2'}"),
    ("def normalize_spaces(text: str) -> str:", "Collapse every run of whitespace into one space and strip both ends.\n    >>> normalize_spaces('  a   b \\t c ')\n    'a b c'"),
    ("def max_profit(prices: list) -> int:", "Return the best profit of one buy followed by one sell (0 if none is positive).\n    >>> max_profit([7, 1, 5, 3, 6, 4])\n    5"),
    ("def grade_letter(score: int) -> str:", "Map a score from 0 to 100 to 'A' (90+), 'B' (80+), 'C' (70+), 'D' (60+) or 'F'.\n    >>> grade_letter(85)\n    'B'"),
    ("def sum_of_multiples(limit: int, factors: list) -> int:", "Sum the distinct numbers below limit that are multiples of any factor.\n    >>> sum_of_multiples(20, [3, 5])\n    78"),
    ("def acronym(phrase: str) -> str:", "Return the upper-case first letters of the words of phrase.\n    >>> acronym('portable network graphics')\n    'PNG'"),
    ("def mask_card(number: str) -> str:", "Replace every character except the last four with '*'.\n    >>> mask_card('4111222233334444')\n    '************4444'"),
    ("def next_palindrome(n: int) -> int:", "Return the smallest palindromic number larger than n.\n    >>> next_palindrome(123)\n    131"),
    ("def group_by_length(words: list) -> dict:", "Group words by their length, keeping their order within a group.\n    >>> group_by_length(['a', 'bb', 'cc'])\n    {1: ['a'], 2: ['bb', 'cc']}"),
    ("def hex_to_rgb(code: str) -> tuple:", "Convert a colour like '#ff8000' to an (r, g, b) tuple of integers.\n    >>> hex_to_rgb('#ff8000')\n    (255, 128, 0)"),
    ("def triangle_numbers(n: int) -> list:", "Return the first n triangle numbers.\n    >>> triangle_numbers(4)\n    [1, 3, 6, 10]"),
    ("def rotate_right(s: str, k: int) -> str:", "Rotate the characters of s to the right by k places.\n    >>> rotate_right('abcde', 2)\n    'deabc'"),
    ("def bits_to_int(bits: list) -> int:", "Interpret a list of 0s and 1s (most significant first) as an integer.\n    >>> bits_to_int([1, 0, 1])\n    5"),
    ("def cumulative_product(xs: list) -> list:", "Return the running product of xs.\n    >>> cumulative_product([1, 2, 3, 4])\n    [1, 2, 6, 24]"),
    ("def longest_vowel_stretch(s: str) -> int:", "Return the length of the longest stretch of consecutive vowels in s.\n    >>> longest_vowel_stretch('beautiful')\n    3"),
    ("def is_armstrong(n: int) -> bool:", "Return True if n equals the sum of its digits, each raised to the number of digits.\n    >>> is_armstrong(153)\n    True\n    >>> is_armstrong(10)\n    False"),
    ("def split_evens_odds(xs: list) -> tuple:", "Return (evens, odds) of xs, each in the original order.\n    >>> split_evens_odds([1, 2, 3, 4])\n    ([2, 4], [1, 3])"),
    ("def weekday_name(index: int) -> str:", "Return the weekday for index 0 (Monday) to 6 (Sunday), or '' otherwise.\n    >>> weekday_name(0)\n    'Monday'"),
    ("def count_char_kinds(s: str) -> dict:", "Count letters, digits and other characters of s.\n    >>> count_char_kinds('ab1!')\n    {'letters': 2, 'digits': 1, 'other': 1}"),
    ("def temperature_trend(temps: list) -> str:", "Return 'rising' if each reading is higher than the last, 'falling' if each is\n    lower, else 'mixed'.\n    >>> temperature_trend([1, 3, 7])\n    'rising'"),
    ("def title_except(text: str, small: list) -> str:", "Capitalise every word except those in small (the first word is always capitalised).\n    >>> title_except('the lord of the rings', ['of', 'the'])\n    'The Lord of the Rings'"),
    ("def kth_largest(xs: list, k: int) -> int:", "Return the k-th largest value of xs (k = 1 is the maximum).\n    >>> kth_largest([3, 9, 4, 1], 2)\n    4"),
    ("def run_length_decode(s: str) -> str:", "Decode a string like 'a3b1' into 'aaab'.\n    >>> run_length_decode('x2y3')\n    'xxyyy'"),
    ("def within_budget(prices: dict, budget: float) -> list:", "Return the sorted names of the items whose price is at most budget.\n    >>> within_budget({'tea': 3.5, 'cake': 6.0, 'jam': 2.0}, 4)\n    ['jam', 'tea']"),
    ("def days_in_month(month: int, year: int) -> int:", "Return the number of days of a month (1-12) in the given year.\n    >>> days_in_month(2, 2024)\n    29\n    >>> days_in_month(4, 2023)\n    30"),
    ("def common_suffix(words: list) -> str:", "Return the longest suffix shared by every word of a non-empty list.\n    >>> common_suffix(['walking', 'talking', 'king'])\n    'king'"),
]

#: Helper lines some stubs start with (imports, as real modules have).
PY_PRELUDES = ["", "", "from typing import List\n\n\n", "import math\n\n\n", "from typing import List, Optional\n\n\n"]

"""Word lists for the training prompt generator (``updraft.data.prompts``), written for updraft.

Nothing here comes from a dataset: topics, people, tasks and code stubs are plain lists that the
generator crosses with its task templates. The EAGLE evaluation sets are never read to build them.
"""

from __future__ import annotations

#: General topics (for writing, explanation, lists, dialogue, passages).
TOPICS = [
    "urban gardening", "the history of the printing press", "volcanoes", "coral reefs", "solar power",
    "electric cars", "the water cycle", "ancient Rome", "the Silk Road", "honeybees", "black holes",
    "the human immune system", "sleep and memory", "remote work", "public libraries", "recycling plastic",
    "the invention of the telephone", "climate change and farming", "deep sea creatures", "the Moon landing",
    "jazz music", "chess strategy", "learning a second language", "marathon training", "home composting",
    "the stock market", "personal budgeting", "cloud computing", "password security", "open source software",
    "the Renaissance", "the French Revolution", "medieval castles", "the Great Wall of China", "rainforests",
    "desert ecosystems", "migratory birds", "wolves in the wild", "photosynthesis", "earthquakes",
    "tides and the Moon", "the periodic table", "vaccines", "antibiotic resistance", "nutrition for athletes",
    "meditation", "team leadership", "job interviews", "starting a small business", "online privacy",
    "3D printing", "robots in factories", "self-driving cars", "space telescopes", "Mars exploration",
    "the life of a lighthouse keeper", "street food around the world", "baking bread", "coffee farming",
    "tea ceremonies", "board games", "video game design", "film photography", "watercolor painting",
    "classical architecture", "bridges and how they stand", "the postal service", "trains in the 1800s",
    "the history of chocolate", "spices and trade", "renewable energy jobs", "city traffic", "bicycle commuting",
    "mountain hiking safety", "camping with kids", "caring for a puppy", "house cats", "aquarium fish",
    "bird watching", "the Arctic", "penguins", "glaciers", "rivers and floods", "drinking water",
    "earth's magnetic field", "lightning", "hurricanes", "weather forecasting", "the internet's history",
    "smartphones and attention", "social media and teenagers", "digital art", "museum visits", "poetry slams",
    "children's books", "the Olympic Games", "football tactics", "basketball history", "swimming technique",
    "yoga for beginners", "first aid basics", "time management", "procrastination", "writing a resume",
    "public speaking", "negotiation", "customer service", "supply chains", "inflation", "minimum wage debates",
    "electric grids", "nuclear fusion", "batteries", "quantum computers", "machine learning", "data privacy laws",
    "the scientific method", "fossils and dinosaurs", "human evolution", "the Amazon river", "island nations",
    "a small fishing village", "night markets", "festivals of light", "volunteering", "minimalist living",
]

#: Concepts for explanation and question prompts, by field.
CONCEPTS = {
    "science": [
        "gravity", "entropy", "natural selection", "the greenhouse effect", "DNA replication", "osmosis",
        "plate tectonics", "the Doppler effect", "chemical bonds", "nuclear fission", "the speed of light",
        "inertia", "friction", "buoyancy", "sound waves", "static electricity", "magnetism", "evaporation",
        "the carbon cycle", "cell division", "enzymes", "the nervous system", "blood circulation", "ecosystems",
    ],
    "technology": [
        "a compiler", "an operating system", "a database index", "public-key encryption", "a hash function",
        "TCP/IP", "DNS", "a neural network", "garbage collection", "a CPU cache", "virtual memory", "a GPU",
        "version control with git", "unit testing", "an API", "a web browser", "Wi-Fi", "GPS", "a blockchain",
        "containerization", "load balancing", "caching", "recursion", "binary search",
    ],
    "economics": [
        "supply and demand", "compound interest", "opportunity cost", "inflation", "a central bank",
        "comparative advantage", "a recession", "taxes", "insurance", "diversification", "a monopoly",
        "exchange rates", "budget deficits", "credit scores", "index funds", "price elasticity",
    ],
    "humanities": [
        "democracy", "the Enlightenment", "the Industrial Revolution", "colonialism", "the Cold War",
        "ancient Greek philosophy", "the scientific revolution", "human rights", "utilitarianism", "stoicism",
        "the printing revolution", "the origins of writing", "the role of myths", "impressionism", "satire",
    ],
    "health": [
        "the immune response", "cholesterol", "hydration", "sleep cycles", "stress hormones", "metabolism",
        "allergies", "muscle growth", "blood pressure", "vitamins", "posture", "the gut microbiome",
    ],
}

AUDIENCES = [
    "a ten-year-old", "a high school student", "a busy manager", "a complete beginner", "a grandparent",
    "a university student", "a software engineer", "a curious teenager", "a new employee", "a tourist",
]

STYLES = ["formal", "friendly", "humorous", "persuasive", "concise", "poetic", "enthusiastic", "neutral"]

PEOPLE = [
    "a chef", "a detective", "an astronaut", "a teacher", "a nurse", "a farmer", "a pirate", "a robot",
    "a museum guide", "a librarian", "a taxi driver", "a scientist", "a student", "a shop owner", "a coach",
    "a journalist", "a grandmother", "a travel agent", "a park ranger", "a software developer",
]

PLACES = [
    "a mountain village", "a busy train station", "a space station", "an old bookstore", "a desert town",
    "a floating market", "a lighthouse", "a rainy city", "a small island", "a school library",
    "a hospital at night", "a farm in autumn", "a harbor at dawn", "an abandoned theater", "a ski resort",
]

WRITING_FORMS = [
    "short story", "poem", "blog post", "letter", "speech", "diary entry", "product description",
    "news report", "fable", "song lyrics", "advertisement", "limerick", "haiku sequence", "essay",
]

LANGUAGES = ["Python", "JavaScript", "C", "C++", "Java", "Go", "Rust", "TypeScript", "Ruby", "C#"]

#: Coding tasks phrased to follow "a function that ...".
CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "counts the vowels in a string", "merges two sorted lists", "removes duplicates from a list",
    "finds the largest element in an array", "checks whether a string is a palindrome",
    "computes the factorial of a number", "converts Celsius to Fahrenheit", "sorts a list with bubble sort",
    "implements binary search", "flattens a nested list", "counts word frequencies in a text",
    "validates an email address", "finds the greatest common divisor of two numbers",
    "rotates a matrix by 90 degrees", "checks whether two strings are anagrams",
    "parses a CSV line into fields", "computes the average of a list of numbers",
    "returns the second largest number in a list", "converts a decimal number to binary",
    "capitalizes the first letter of every word", "finds all pairs in a list that sum to a target",
    "checks whether parentheses in a string are balanced", "generates all subsets of a set",
    "implements a stack with push and pop", "implements a queue using two stacks",
    "computes the edit distance between two strings", "finds the longest common prefix of several strings",
    "reads a text file and counts its lines", "returns the running sum of a list",
    "splits a list into chunks of a given size", "transposes a matrix", "computes simple interest",
    "finds the missing number in a list of 1 to n", "checks whether a year is a leap year",
    "counts the set bits of an integer", "converts Roman numerals to integers", "implements quicksort",
]

#: Function stubs (signature, docstring) for "complete this code" prompts.
CODE_STUBS = [
    ("def sum_of_squares(nums: list) -> int:", "Return the sum of the squares of the numbers in nums.\n    >>> sum_of_squares([1, 2, 3])\n    14"),
    ("def is_sorted(xs: list) -> bool:", "Return True if xs is sorted in non-decreasing order.\n    >>> is_sorted([1, 2, 2, 5])\n    True"),
    ("def count_words(text: str) -> int:", "Return how many whitespace-separated words text contains.\n    >>> count_words('a b  c')\n    3"),
    ("def clamp(x: float, lo: float, hi: float) -> float:", "Limit x to the closed interval [lo, hi].\n    >>> clamp(5, 0, 3)\n    3"),
    ("def first_repeated_char(s: str) -> str:", "Return the first character that appears twice in s, or '' if none.\n    >>> first_repeated_char('abca')\n    'a'"),
    ("def digits_sum(n: int) -> int:", "Return the sum of the decimal digits of the non-negative integer n.\n    >>> digits_sum(1234)\n    10"),
    ("def interleave(a: list, b: list) -> list:", "Alternate elements of a and b; leftovers go at the end.\n    >>> interleave([1, 3], [2, 4, 6])\n    [1, 2, 3, 4, 6]"),
    ("def most_common(xs: list):", "Return the most frequent element of xs (the first one on ties).\n    >>> most_common([3, 1, 3, 2])\n    3"),
    ("def to_snake_case(name: str) -> str:", "Convert a CamelCase name to snake_case.\n    >>> to_snake_case('HelloWorld')\n    'hello_world'"),
    ("def product_except_self(nums: list) -> list:", "Return a list where item i is the product of all nums except nums[i].\n    >>> product_except_self([1, 2, 3])\n    [6, 3, 2]"),
    ("def moving_average(xs: list, k: int) -> list:", "Return the averages of every window of k consecutive items.\n    >>> moving_average([1, 2, 3, 4], 2)\n    [1.5, 2.5, 3.5]"),
    ("def even_positions(xs: list) -> list:", "Return the items at even indices.\n    >>> even_positions(['a', 'b', 'c'])\n    ['a', 'c']"),
    ("def compress(s: str) -> str:", "Run-length encode s.\n    >>> compress('aaabcc')\n    'a3b1c2'"),
    ("def safe_divide(a: float, b: float) -> float:", "Return a / b, or 0.0 when b is zero.\n    >>> safe_divide(1, 0)\n    0.0"),
    ("def vowel_positions(word: str) -> list:", "Return the indices of the vowels in word.\n    >>> vowel_positions('banana')\n    [1, 3, 5]"),
    ("def longest_word(sentence: str) -> str:", "Return the longest word of the sentence (the first on ties).\n    >>> longest_word('a bee flew')\n    'flew'"),
    ("def triangle_kind(a: int, b: int, c: int) -> str:", "Return 'equilateral', 'isosceles', 'scalene' or 'invalid'.\n    >>> triangle_kind(2, 2, 3)\n    'isosceles'"),
    ("def count_positive(xs: list) -> int:", "Count the strictly positive numbers in xs.\n    >>> count_positive([-1, 0, 4, 5])\n    2"),
    ("def rotate_left(xs: list, k: int) -> list:", "Rotate xs left by k places.\n    >>> rotate_left([1, 2, 3, 4], 1)\n    [2, 3, 4, 1]"),
    ("def nested_depth(xs) -> int:", "Return how deeply lists are nested in xs (a flat list has depth 1).\n    >>> nested_depth([1, [2, [3]]])\n    3"),
]

NAMES = [
    "Maya", "Omar", "Lena", "Tariq", "Sofia", "Kenji", "Amara", "Lucas", "Priya", "Mateo", "Hana", "Felix",
    "Zara", "Ivan", "Noor", "Diego", "Elif", "Jonas", "Aisha", "Theo", "Mei", "Rafael", "Ines", "Kofi",
]

ITEMS = [
    ("apples", "basket"), ("pencils", "box"), ("cookies", "tray"), ("stickers", "sheet"), ("marbles", "bag"),
    ("books", "shelf"), ("eggs", "carton"), ("flowers", "bunch"), ("cards", "deck"), ("bottles", "crate"),
]

#: Situations people ask advice about (multi-turn "advice" prompts).
SITUATIONS = [
    "I just moved to a new city and don't know anyone", "my team at work keeps missing deadlines",
    "I want to start running but I get bored quickly", "I have an exam in two weeks and haven't started studying",
    "my roommate never cleans the kitchen", "I want to save money for a trip next summer",
    "I was offered a job with more pay but a longer commute", "my ten-year-old doesn't want to read books",
    "I keep checking my phone when I should be working", "I need to give a presentation to senior managers",
    "my small bakery is losing customers to a chain store", "I want to learn to cook healthy meals on a budget",
    "a friend borrowed money and hasn't paid it back", "I'm planning a garden but only have a balcony",
    "I want to switch careers into data analysis", "my elderly parents live far away and need more help",
    "I'm nervous about my first week at a new job", "our volunteer group is losing members",
    "I want to write a novel but never finish anything", "my dog barks whenever I leave the house",
    "I have trouble falling asleep before midnight", "I need to choose between two universities",
    "my neighbor plays loud music late at night", "I want to reduce my household's plastic waste",
]

#: Second user turns of a multi-turn conversation (they refer back to the first answer).
SECOND_TURNS = [
    "Can you make that shorter and put it in a numbered list?", "What if I only have one hour a week for this?",
    "Which of those steps matters most, and why?", "Thanks. Can you write that as a short email I could send?",
    "Now explain the same advice to a teenager.", "What are the most common mistakes people make with this?",
    "Give me a concrete plan for the first seven days.", "Summarize your answer in two sentences.",
    "Rewrite your answer in a more encouraging tone.", "What could go wrong, and how do I handle it?",
    "Can you turn that into a table with columns for step, time needed and cost?",
    "Give me a follow-up question I should ask myself before I start.",
]

#: Personas for role play (speak as them, in the first person).
PERSONAS = [
    "a famous detective from a 19th-century novel", "a medieval knight", "a pirate captain", "a friendly robot",
    "a wise old wizard", "a sports commentator", "a grumpy cat", "a time traveler from the year 3000",
    "an ancient Greek philosopher", "a stand-up comedian", "a strict but kind piano teacher",
    "a tour guide in Rome", "a superhero on their day off", "a ship's doctor on a long voyage",
    "a nature documentary narrator", "a fairy-tale queen", "a spaceship's onboard computer", "a jazz musician",
]

#: Essay subjects in science, technology, history and the humanities.
ESSAY_SUBJECTS = [
    "how vaccines train the immune system", "why the Roman Empire fell", "what causes inflation",
    "how a bill becomes a law", "the causes of the First World War", "how electricity reaches our homes",
    "the influence of Shakespeare on modern English", "why the sky is blue", "how the internet routes data",
    "the ethics of artificial intelligence", "the importance of the printing press", "how plate tectonics shapes continents",
    "the role of the Silk Road in spreading ideas", "how antibiotics work and why resistance develops",
    "the Industrial Revolution's effect on cities", "the philosophy of Stoicism", "how GPS finds your position",
    "the water crisis in dry regions", "the difference between weather and climate", "why democracy needs a free press",
]

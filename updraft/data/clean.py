"""Cleaning of the user requests the target writes itself (``self_instruct`` and ``free_turn``
prompts, stage 1).

The text a small instruct model writes when asked for "one realistic request" is rarely just
the request: it comes wrapped in quotes or a code fence, after a preamble ("Sure! Here is a
request a student might send:") or a label ("**Request:**"), followed by a blank line and an
explanation or by its own answer ("Response: ..."), sometimes empty, an echo of the instruction
or a refusal. ``clean_request`` keeps the request itself, or returns None when nothing usable
is left (the caller then uses the prompt's deterministic fallback request).

Pure string functions with no imports from the rest of ``updraft.data`` (``types`` imports this).
"""

from __future__ import annotations

import re

#: Longest request kept, in characters (~250 tokens); a longer one is cut at a sentence end.
MAX_CHARS = 1200
#: Fewest words of a usable request.
MIN_WORDS = 4

_PREAMBLE = re.compile(
    # "Sure! Here's ..." / "Certainly.\n..." (a bare interjection only: "Okay so I need ..." is a request)
    r"^(?:sure|ok(?:ay)?|certainly|of course|absolutely)\s*[!.,:]*\s*(?=here|below|\n|$)"
    # "A student might send this message to an AI assistant: ..." (narration before the request)
    r"|^[^\n\"\u201c]{0,160}\b(?:might|would|could)\s+(?:send|write|type|ask)\b[^\n\"\u201c]*?[:,]\s*(?=[\"\u201c])",
    re.IGNORECASE,
)
#: "Here is a realistic request a student might send:" / "Here's one:", also after a sentence of
#: chatter ("What a delightful request! ... Here's a factual question about Canada:").
_HERE = re.compile(
    r"(?:^|[.!?]\s+|\n)(?:here(?:'s|\u2019s| is| are)|below is)\b[^\n:.!?]*\b(?:request|prompt|message|question|query|"
    r"example|one)\b[^\n:.!?]*:\s*",
    re.IGNORECASE,
)
_LABEL = re.compile(
    r"^[#*_>\s]*(?:the\s+)?(?:user(?:'s)?\s+(?:request|message|prompt|question)|request|prompt|question|query|message|user|"
    r"task|input|human|customer|student)\s*\d*\s*[*_]*\s*[:\-\u2013\u2014]\s*[*_]*\s*"
    r"|^[#*_>\s]*[qa]\s*:\s*",  # "Q:" / "A:" (a colon only: "A-level ..." is a request)
    re.IGNORECASE,
)
#: Where the model starts answering its own request (or commenting on it) on a new line.
_ANSWER = re.compile(
    r"\n\s*[#*_>]*\s*(?:answer|response|reply|assistant|ai|ai assistant|output|explanation|note)\s*[*_]*\s*:", re.IGNORECASE
)
_FENCE = re.compile(r"^```[\w-]*\n(.*?)(?:\n```\s*)?$", re.DOTALL)
_PAIRS = {'"': '"', "\u201c": "\u201d", "\u00ab": "\u00bb", "'": "'", "\u2018": "\u2019", "`": "`"}
_REFUSALS = ("as an ai", "i'm sorry", "i am sorry", "i cannot", "i can't", "sorry,")
#: The model writing as the assistant instead of the user (a small model's commonest failure:
#: "I'm here to help you with your ... What's your question?").
_ASSISTANT_VOICE = re.compile(
    r"\b(?:i'?m|i am)\s+(?:here|ready|happy|glad|thrilled|excited|always happy|delighted)\s+to\s+(?:help|assist|collaborate)"
    r"|\bhow (?:can|may) i (?:help|assist)|\bwhat(?:'s| is) on your mind"
    r"|\bwhat(?:'s| is) your [\w\s-]{0,30}(?:question|request|problem|idea)\s*\?"
    r"|\bas an? (?:ai|chatbot|language model)\b|\bi'?m an? (?:\w+ ){0,2}(?:ai|chatbot|assistant)\b|\bto assist you\b",
    re.IGNORECASE,
)


def _unquote(s: str) -> str:
    """Drop quotes that wrap the whole text, or an opening quote never closed (the response
    was cut); quotes inside it (a quoted sentence to proofread) stay."""
    if len(s) < 2 or s[0] not in _PAIRS:
        return s
    close = _PAIRS[s[0]]
    if s[-1] == close and close not in s[1:-1]:
        return s[1:-1].strip()
    if close not in s[1:]:
        return s[1:].strip()
    return s


def _strip_wrapping(s: str) -> str:
    """Preambles, labels, code fences and wrapping quotes, in any nesting, until none is left."""
    for _ in range(4):
        before = s
        s = s.strip()
        fenced = _FENCE.match(s)
        if fenced:
            s = fenced.group(1).strip()
        s = _PREAMBLE.sub("", s, count=1)
        here = _HERE.search(s[:400])
        if here:
            s = s[here.end():]
        s = _LABEL.sub("", s, count=1)
        s = _unquote(s.strip()).strip("*_ \n")
        if s == before:
            break
    return s


def _first_block(s: str) -> str:
    """Up to the first blank line; a first paragraph that ends in ':' introduces a text the
    user includes (to extract from, to proofread), and a salutation ("Dear AI,") a letter, so
    the next paragraph is kept too."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", s) if p.strip()]
    if not paras:
        return ""
    opens = paras[0].endswith(":") or (paras[0].endswith(",") and len(paras[0].split()) <= 4)
    if opens and len(paras) > 1:
        return paras[0] + "\n\n" + paras[1]
    return paras[0]


def _cap(s: str, limit: int = MAX_CHARS) -> str:
    """At most ``limit`` characters, cut after the last sentence end in the second half of the
    limit, else at the last space."""
    if len(s) <= limit:
        return s
    head = s[:limit]
    ends = [m.end() for m in re.finditer(r"[.?!](?=\s)", head)]
    if ends and ends[-1] >= limit // 2:
        return head[: ends[-1]].strip()
    return head.rsplit(None, 1)[0].strip()


def clean_request(text: str, instruction: str = "") -> str | None:
    """The user request in the target's stage-1 ``text``, or None when none is usable: empty,
    under ``MIN_WORDS`` words, mostly not letters, a loop of a few words (a random model's junk still often passes:
    the fallback is for what is clearly unusable), a refusal, the assistant's voice, or an echo of ``instruction``
    (the stage-1 prompt)."""
    s = _strip_wrapping(text.replace("\r\n", "\n"))
    cut = _ANSWER.search(s)
    if cut:
        s = s[: cut.start()]
    s = _strip_wrapping(_cap(_first_block(s)))
    if not _usable(s):
        return None
    if instruction and s.lower()[:60] in instruction.lower():
        return None
    return s


def clean_user_turn(text: str, complete: bool = True) -> str | None:
    """The user message the target wrote as the user (``free_turn`` prompts, stage 1: an open
    user turn it continued), or None when it is unusable (as ``clean_request`` judges). Nothing
    wraps such a message, so only its ends are trimmed: a line where the model starts answering
    itself ("Assistant: ...") and what follows, the part past ``MAX_CHARS``, and, when the turn
    did not end by itself (``complete`` False: cut by its token cap), the unfinished last
    sentence. Paragraphs stay (a user pastes a text to work on)."""
    s = text.replace("\r\n", "\n").strip()
    cut = _ANSWER.search(s)
    if cut:
        s = s[: cut.start()]
    if not complete:
        ends = [m.end() for m in re.finditer(r"[.?!](?=\s|$)", s)]
        s = s[: ends[-1]] if ends else ""
    s = _cap(s.strip()).strip()
    return s if _usable(s) else None


def _usable(s: str) -> bool:
    """At least ``MIN_WORDS`` words, mostly letters, not a loop of a few words, no refusal and
    not the assistant's voice."""
    if len(s.split()) < MIN_WORDS:
        return False
    visible = [c for c in s if not c.isspace()]
    if sum(c.isalpha() for c in visible) < 0.5 * len(visible):
        return False
    low = s.lower()
    words = low.split()
    if len(words) >= 20 and len(set(words)) < 0.3 * len(words):  # a degenerate loop
        return False
    return not (low.startswith(_REFUSALS) or _ASSISTANT_VOICE.search(s))

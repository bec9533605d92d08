"""Incremental detokenisation and stop-string matching for streamed output.

``IncrementalDetokenizer`` turns output token ids into text deltas without re-decoding the whole
output; ``StopChecker`` turns those deltas into text that is safe to stream, holding back
anything that could still become a stop string. ``TextStream`` puts the two together for a
request: one decode per batch of tokens (a speculative iteration emits several), falling back to
token-by-token only when a stop string completes inside the batch.
"""

from __future__ import annotations

from typing import Protocol

REPLACEMENT = "\ufffd"  # what lossy UTF-8 decoding puts where bytes are incomplete or invalid

# Prompt tokens decoded as context before the first output token. Decoders such as SentencePiece
# strip the leading space of the first token of a decode() call; with context, that stripping
# falls on prompt text we never emit, so the first output token keeps its space.
PROMPT_CONTEXT_TOKENS = 5

# Tokens that may stay undecided (text ending in U+FFFD) before we give up waiting. A UTF-8
# character is at most 4 bytes, so real models never get close; the cap only bounds the cost per
# call for a stream of invalid bytes, whose text is mojibake anyway.
MAX_PENDING_TOKENS = 32


class Decoder(Protocol):
    """What the detokenizer needs from a tokenizer (``tokenizers.Tokenizer`` and HF fit)."""

    def decode(self, ids: list[int], skip_special_tokens: bool) -> str: ...


class IncrementalDetokenizer:
    """Streams the text of one request's output tokens, O(new tokens) per ``add``.

    It decodes a window that starts at a clean boundary (a token position where the decoded text
    so far ended in a complete character) and emits the part of the window's text beyond what was
    already accounted for. A window text ending in U+FFFD may be a multi-byte character split
    across tokens, so those trailing replacement characters are held back until a later token
    settles them; ``flush`` releases them at the end of the request.

    Invariant: the concatenation of all ``add`` results and ``flush`` equals ``decode(output)`` for
    byte-level tokenizers, given a prompt whose own decoding is clean.
    """

    def __init__(
        self, tokenizer: Decoder, prompt_ids: list[int], skip_special_tokens: bool = True
    ) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        # Window of token ids decoded on each add; starts at a clean boundary.
        self._window: list[int] = list(prompt_ids[-PROMPT_CONTEXT_TOKENS:])
        self._boundary = len(self._window)  # window[:boundary] is context already accounted for
        # Characters of decode(window) already emitted or belonging to context. A prompt that
        # ends mid-character leaves trailing U+FFFD here: not counted, so when the output
        # completes the character it is emitted as output text.
        self._emitted = len(self._decode(self._window).rstrip(REPLACEMENT))
        self._pieces: list[str] = []
        self._text: str | None = ""

    @property
    def text(self) -> str:
        """All text emitted so far (``add`` results and ``flush``)."""
        if self._text is None:
            self._text = "".join(self._pieces)
            self._pieces = [self._text]
        return self._text

    def add(self, token_ids: list[int]) -> str:
        """Append output tokens; return the newly stable text (possibly empty)."""
        if not token_ids:
            return ""
        self._window.extend(token_ids)
        text = self._decode(self._window)
        pending = len(self._window) - self._boundary
        clean = not text.endswith(REPLACEMENT) or pending > MAX_PENDING_TOKENS
        # Text before a trailing run of U+FFFD ends in a complete character, so later bytes
        # cannot change it: emit it now even if the tail is undecided.
        stable = len(text) if clean else len(text.rstrip(REPLACEMENT))
        delta = text[self._emitted : stable]
        self._emitted = max(self._emitted, stable)
        if clean:
            # Keep the tokens since the previous boundary as context for the next decode (it
            # starts at a clean boundary, and gives the next token its leading space). Decoding
            # costs per id, not per call: a window kept longer to save this decode costs more.
            self._window = self._window[self._boundary :]
            self._boundary = len(self._window)
            self._emitted = len(self._decode(self._window))
        return self._emit(delta)

    def flush(self) -> str:
        """Release held-back text (trailing U+FFFD of an unfinished character) at the end."""
        delta = self._decode(self._window)[self._emitted :]
        self._window = self._window[-1:]
        self._boundary = len(self._window)
        self._emitted = len(self._decode(self._window))
        return self._emit(delta)

    def snapshot(self) -> tuple[object, ...]:
        """State to ``restore`` (cheap: the window list is only ever appended to or replaced)."""
        return (self._window, len(self._window), self._boundary, self._emitted, self._pieces, len(self._pieces), self._text)

    def restore(self, state: tuple[object, ...]) -> None:
        """Undo every ``add``/``flush`` since ``snapshot``."""
        window, n, self._boundary, self._emitted, pieces, k, self._text = state  # type: ignore[assignment]
        del window[n:]  # type: ignore[index]
        del pieces[k:]  # type: ignore[index]
        self._window, self._pieces = window, pieces  # type: ignore[assignment]

    def _emit(self, delta: str) -> str:
        if delta:
            self._pieces.append(delta)
            self._text = None
        return delta

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip)


class StopChecker:
    """Matches stop strings across streamed text deltas.

    ``feed`` returns only text that can no longer become part of a stop string: the longest
    suffix of the text so far that is a proper prefix of some stop string is held back until the
    next delta decides it. The match reported is the first one to complete in the character
    stream (earliest end; at equal ends the earliest start), so the result does not depend on how
    the text was split into deltas. Output is truncated before the match, or after it when
    ``include_stop``.
    """

    def __init__(self, stop: list[str], include_stop: bool) -> None:
        if any(not s for s in stop):
            raise ValueError("stop strings must be non-empty")
        self._stop = list(stop)
        self._firsts = {s[0] for s in stop}
        self._longest = max((len(s) for s in stop), default=1)
        self._include = include_stop
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that matched, once stopped

    def feed(self, delta: str) -> tuple[str, bool]:
        """Add ``delta``; return (text safe to emit now, whether a stop string matched).

        After a match every call returns ``("", True)``.
        """
        if self.stopped:
            return "", True
        if not self._stop:
            return delta, False
        # A match cannot start in already emitted text: emitted text never ends inside a
        # possible stop-string prefix. So searching held + delta is enough.
        buf = self._held + delta
        best: tuple[int, int, str] | None = None  # (end, start, stop string)
        for s in self._stop:
            start = buf.find(s)
            if start >= 0 and (best is None or (start + len(s), start) < best[:2]):
                best = (start + len(s), start, s)
        if best is not None:
            end, start, s = best
            self.stopped, self.matched, self._held = True, s, ""
            return buf[: end if self._include else start], True
        keep = self._partial_suffix(buf)
        self._held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep], False

    @property
    def active(self) -> bool:
        """Whether there are stop strings to match (otherwise ``feed`` passes text through)."""
        return bool(self._stop)

    def snapshot(self) -> tuple[str, bool, str | None]:
        return self._held, self.stopped, self.matched

    def restore(self, state: tuple[str, bool, str | None]) -> None:
        self._held, self.stopped, self.matched = state

    def flush(self) -> str:
        """Held-back text, for a request that ended without matching a stop string."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_suffix(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of a stop string."""
        longest = min(len(buf), self._longest - 1)
        if longest <= 0 or self._firsts.isdisjoint(buf[len(buf) - longest :]):
            return 0  # no stop string can even start in the tail (the common case)
        for k in range(longest, 0, -1):
            tail = buf[-k:]
            if any(s.startswith(tail) for s in self._stop):
                return k
        return 0


class TextStream:
    """A request's output text: incremental detokenisation plus stop strings, fed in batches.

    ``feed(tokens)`` decodes a whole batch at once. A stop string that completes inside the
    batch must cut the output at the token whose text completed it (what token-by-token feeding
    gives, and what the engine reports as emitted ids), so then the batch is undone and replayed
    one token at a time; stops are rare, so the common case is one decode per batch.
    """

    def __init__(
        self, tokenizer: Decoder, prompt_ids: list[int], skip_special_tokens: bool, stop: list[str], include_stop: bool
    ) -> None:
        self.detok = IncrementalDetokenizer(tokenizer, prompt_ids, skip_special_tokens)
        self.stop = StopChecker(stop, include_stop)
        self.has_stop_strings = self.stop.active

    def feed(self, tokens: list[int]) -> tuple[str, int | None]:
        """Add ``tokens``; return (text safe to emit, index in ``tokens`` of the token whose text
        completed a stop string, or None). Tokens after that index are not consumed."""
        if not tokens:
            return "", None
        if not self.stop.active:
            return self.detok.add(tokens), None
        if len(tokens) == 1:
            text, stopped = self.stop.feed(self.detok.add(tokens))
            return text, 0 if stopped else None
        state = self.detok.snapshot(), self.stop.snapshot()
        text, stopped = self.stop.feed(self.detok.add(tokens))
        if not stopped:
            return text, None
        self.detok.restore(state[0])
        self.stop.restore(state[1])
        out = ""
        for i, tok in enumerate(tokens):
            text, stopped = self.stop.feed(self.detok.add([tok]))
            out += text
            if stopped:
                return out, i
        # Only a batch can match where single tokens do not yet: the undecided tail of a
        # multi-byte character is held back per token but may settle within the batch. The
        # single-token replay is the reference; its held-back text stays held.
        return out, None

    def finish(self) -> str:
        """End of a request that did not stop on a string: release held-back text (an unfinished
        final character still counts, and may itself complete a stop string)."""
        text, stopped = self.stop.feed(self.detok.flush())
        return text if stopped else text + self.stop.flush()

"""IncrementalDetokenizer and StopChecker: streamed text must equal the one-shot answer."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from updraft.engine.detokenizer import IncrementalDetokenizer, StopChecker

CORPUS = [
    "Hello world, the quick brown fox jumps over the lazy dog.",
    "你好，世界！今天天气很好。我们去公园散步吧。",
    "Emoji time 🎉🎉 🚀✨ 👩‍👩‍👧 done",
    "café naïve résumé Ünïcödé façade",
    "Привет мир, как дела?",
    "こんにちは世界、カタカナとひらがな",
]
SPECIALS = ["<s>", "</s>"]


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    """A small byte-level BPE: its 256 byte tokens let random sequences split characters."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=SPECIALS,
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 10, trainer)
    return tok


def stream(detok: IncrementalDetokenizer, ids: list[int], cuts: list[int]) -> list[str]:
    """Feed ``ids`` in chunks ending at the sorted ``cuts``; return every delta incl. flush."""
    deltas, start = [], 0
    for end in sorted({c % (len(ids) + 1) for c in cuts} | {len(ids)}):
        deltas.append(detok.add(ids[start:end]))
        start = end
    return deltas + [detok.flush()]


class CountingDecoder:
    """Wraps a tokenizer and counts the token ids it is asked to decode."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok, self.decoded = tok, 0

    def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        self.decoded += len(ids)
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


# ---------------------------------------------------------------- IncrementalDetokenizer


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.sampled_from(CORPUS + ["", "x", " 🎉"]),
    data=st.data(),
    skip=st.booleans(),
    cuts=st.lists(st.integers(0, 200), max_size=30),
)
def test_deltas_concatenate_to_decode(
    bpe: Tokenizer, prompt: str, data: st.DataObject, skip: bool, cuts: list[int]
) -> None:
    vocab = bpe.get_vocab_size()
    out = data.draw(st.lists(st.integers(0, vocab - 1), max_size=60))
    detok = IncrementalDetokenizer(bpe, bpe.encode(prompt).ids, skip_special_tokens=skip)
    deltas = stream(detok, out, cuts)
    want = bpe.decode(out, skip_special_tokens=skip)
    assert "".join(deltas) == want == detok.text
    # Only trailing replacement characters (an unfinished character) ever wait for flush.
    assert set(deltas[-1]) <= {"\ufffd"}


def byte_tokens(bpe: Tokenizer, text: str) -> list[int]:
    """One base token per UTF-8 byte of ``text`` (byte-level BPE maps each byte to a char)."""
    words = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)
    ids = [bpe.token_to_id(char) for word, _ in words for char in word]
    assert None not in ids and len(ids) == len(text.encode())
    return ids


def test_multibyte_characters_split_across_tokens(bpe: Tokenizer) -> None:
    text = "你好 🎉 café 👩‍👩‍👧 Привет"
    detok = IncrementalDetokenizer(bpe, bpe.encode("Say:").ids)
    deltas = [detok.add([i]) for i in byte_tokens(bpe, text)]
    assert "".join(deltas) == text and detok.flush() == ""
    # No delta ever contains half a character: each is valid text on its own.
    assert all("\ufffd" not in d for d in deltas)


def test_first_token_keeps_leading_space(bpe: Tokenizer) -> None:
    prompt, out = bpe.encode("Hello").ids, bpe.encode(" world").ids
    detok = IncrementalDetokenizer(bpe, prompt)
    assert detok.add(out[:1]).startswith(" ")


def test_prompt_ending_mid_character_is_completed_by_output(bpe: Tokenizer) -> None:
    emoji = byte_tokens(bpe, "🎉")
    detok = IncrementalDetokenizer(bpe, bpe.encode("hi").ids + emoji[:2])
    assert detok.add(emoji[2:]) == "🎉"


def test_work_per_add_is_bounded(bpe: Tokenizer) -> None:
    counter = CountingDecoder(bpe)
    rng = random.Random(0)
    out = bpe.encode(" ".join(rng.choice(CORPUS) for _ in range(40))).ids
    detok = IncrementalDetokenizer(counter, bpe.encode("prompt").ids)
    for i in out:
        detok.add([i])
    assert detok.text == bpe.decode(out)
    # Re-decoding the whole output each step would cost ~len(out)**2 / 2 ids.
    assert counter.decoded < 12 * len(out) < len(out) ** 2 / 2


def test_smollm2_tokenizer(request: pytest.FixtureRequest) -> None:
    try:
        gguf: Path = request.getfixturevalue("smollm2_gguf")
    except pytest.FixtureLookupError:
        pytest.skip("smollm2_gguf fixture not available")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    rng = random.Random(0)
    text = " ".join(CORPUS)
    prompt = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    cases = [tok.encode(text)] + [
        [rng.randrange(len(tok)) for _ in range(rng.randrange(1, 40))] for _ in range(100)
    ]
    for out in cases:
        for skip in (True, False):
            detok = IncrementalDetokenizer(tok, prompt, skip_special_tokens=skip)
            cuts = [rng.randrange(len(out) + 1) for _ in range(rng.randrange(len(out) + 1))]
            deltas = stream(detok, out, cuts)
            assert "".join(deltas) == tok.decode(out, skip_special_tokens=skip)


# ---------------------------------------------------------------- StopChecker


def run_stop(stop: list[str], include: bool, deltas: list[str]) -> tuple[list[str], bool]:
    checker = StopChecker(stop, include)
    emitted, stopped = [], False
    for d in deltas:
        text, stopped = checker.feed(d)
        emitted.append(text)
        if stopped:
            break
    if not stopped:
        emitted.append(checker.flush())
    return emitted, stopped


def reference_stop(text: str, stop: list[str], include: bool) -> tuple[str, bool]:
    """First position in the character stream where some stop string is complete."""
    for end in range(1, len(text) + 1):
        matches = [s for s in stop if text[:end].endswith(s)]
        if matches:
            longest = max(matches, key=len)
            return text[: end if include else end - len(longest)], True
    return text, False


def test_stop_spanning_deltas() -> None:
    emitted, stopped = run_stop(["STOP"], False, ["Hello S", "T", "O", "P tail"])
    assert stopped and emitted == ["Hello ", "", "", ""]
    emitted, stopped = run_stop(["STOP"], True, ["Hello S", "T", "O", "P tail"])
    assert stopped and "".join(emitted) == "Hello STOP"


def test_partial_match_released_when_it_breaks() -> None:
    checker = StopChecker(["STOP"], False)
    assert checker.feed("a ST") == ("a ", False)
    assert checker.feed("Ax") == ("STAx", False)


def test_earliest_completed_match_wins() -> None:
    # "c" completes before "abcd" in the stream, whatever the chunking.
    assert run_stop(["abcd", "c"], False, ["xabcd"]) == (["xab"], True)
    assert run_stop(["abcd", "c"], False, ["xa", "b", "cd"]) == (["x", "", "ab"], True)
    # Equal ends: the longer stop string (earliest start) is removed.
    assert run_stop(["bc", "abc"], False, ["zabc"]) == (["z"], True)
    checker = StopChecker(["bc", "abc"], True)
    assert checker.feed("zabcq") == ("zabc", True) and checker.matched == "abc"


def test_stop_at_start_and_after_stop() -> None:
    checker = StopChecker(["<end>"], False)
    assert checker.feed("<end>more") == ("", True)
    assert checker.feed("anything") == ("", True)
    assert checker.flush() == ""
    assert StopChecker(["<end>"], True).feed("<end>more") == ("<end>", True)


def test_flush_releases_held_text() -> None:
    checker = StopChecker(["STOP", "###"], False)
    assert checker.feed("abc ST") == ("abc ", False)
    assert checker.feed("O##") == ("STO", False)
    assert checker.flush() == "##"
    assert checker.flush() == ""


def test_no_stop_strings_passes_through() -> None:
    assert StopChecker([], False).feed("anything") == ("anything", False)
    with pytest.raises(ValueError):
        StopChecker([""], False)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab c🎉", max_size=30),
    stop=st.lists(st.text(alphabet="ab c🎉", min_size=1, max_size=4), min_size=1, max_size=3),
    include=st.booleans(),
    cuts=st.lists(st.integers(0, 30), max_size=10),
)
def test_stop_matches_reference_for_any_chunking(
    text: str, stop: list[str], include: bool, cuts: list[int]
) -> None:
    bounds = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    deltas = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    emitted, stopped = run_stop(stop, include, deltas)
    want, want_stopped = reference_stop(text, stop, include)
    assert ("".join(emitted), stopped) == (want, want_stopped)
    # What a client has seen after each delta never contains part of a stop string that later
    # completed: it is always a prefix of the final output.
    seen = ""
    for piece in emitted:
        seen += piece
        assert want.startswith(seen)

"""Tokenizer: the default model's GGUF tokenizer against transformers, GGUF vocabularies built
from metadata, Hugging Face folders, and chat templates."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as RustTokenizer

from updraft.errors import CheckpointError, RequestError
from updraft.models.gguf import GGUFCheckpoint
from updraft.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

TEXTS = [
    "Hello, world!",
    "  leading spaces",
    "trailing spaces   ",
    "tabs\tand\nnewlines\n\n\n",
    "12345 678.9 1,000,000 and 3.14159",
    "héllo wörld ÆØÅ",
    "日本語のテキストです。",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧",
    "def f(x):\n    return x**2  # square",
    "<|im_start|>user\nhi<|im_end|>",
    "don't won't I'm they're we'll",
    "ALLCAPS and MiXeD CaSe",
    "a  b   c    d     e",
    "\u00a0non-breaking\u2003em space",
    "x = [1, 2, 3]; y = {'a': 1}",
    "https://example.com/path?q=1&r=2#frag",
    "Ünïcödé ñ ç ß",
    "Здравствуй, мир!",
    "🤖🤖🤖",
    "\r\n windows line\r\n",
    "        deeply indented code",
    "a\u0301 combining accent",
    "x<think>y</think>",
    "",
    " ",
    "\n",
    "<|endoftext|>text after a special token",
    "mid<|im_end|>dle",
    'int main() { printf("%d\\n", 42); }',
    "SELECT * FROM t WHERE id = 7;",
    "ﬁ ligature and ＦＵＬＬ width",
]

CHATS = [
    [{"role": "user", "content": "Hi there"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?\n  Explain   it 😀"},
    ],
]


# ---- the default model vs transformers -----------------------------------------------------
@pytest.fixture(scope="module")
def smol(smollm2_gguf: Path) -> tuple[Tokenizer, object]:
    ours = Tokenizer.from_gguf(GGUFCheckpoint(smollm2_gguf).tokenizer_metadata())
    ref = transformers.AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    return ours, ref


@pytest.mark.parametrize("text", TEXTS)
def test_smollm2_encode_decode_matches_transformers(smol: tuple[Tokenizer, object], text: str) -> None:
    ours, ref = smol
    for special in (True, False):
        ids = ours.encode(text, add_special_tokens=special)
        assert ids == ref.encode(text, add_special_tokens=special)
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)


def test_smollm2_chat_matches_transformers(smol: tuple[Tokenizer, object]) -> None:
    ours, ref = smol
    for chat in CHATS:
        for gen in (True, False):
            text = ours.apply_chat_template(chat, add_generation_prompt=gen)
            assert text == ref.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
            ref_ids = ref.apply_chat_template(chat, tokenize=True, add_generation_prompt=gen, return_dict=False)
            assert ours.encode_chat(chat, add_generation_prompt=gen) == list(ref_ids)


def test_smollm2_open_user_turn(smol: tuple[Tokenizer, object]) -> None:
    """The chat up to the user's words, as transformers renders it: system prompt, user header,
    then the opener and nothing after (no end of turn, no assistant header)."""
    ours, ref = smol
    full = ref.apply_chat_template([{"role": "user", "content": "Write a haiku."}], tokenize=False, add_generation_prompt=False)
    for opener in ("", "Write"):
        ids = ours.encode_open_user_turn(opener)
        text = ours.decode(ids, skip_special_tokens=False)
        assert full.startswith(text) and text.endswith("<|im_start|>user\n" + opener)
        assert text.count("<|im_end|>") == 1  # the system turn's only
        assert ids == ours.encode(text, add_special_tokens=False)


def test_smollm2_special_tokens(smol: tuple[Tokenizer, object]) -> None:
    ours, _ = smol
    assert ours.bos_token_id == 1 and ours.eos_token_id == 2
    assert ours.eos_token_ids == {2, 0}  # <|im_end|> and <|endoftext|>
    assert ours.vocab_size == 49152
    assert ours.id_to_token(1) == "<|im_start|>" and ours.id_to_token(10**6) is None
    assert set(range(17)) <= set(ours.all_special_ids)
    assert ours.encode("hi")[0] != 1  # add_bos_token is false in this file
    assert ours.encode_chat(CHATS[0])[:1] == [1]  # the template writes <|im_start|>


def test_smollm2_digits_follow_llama_cpp(smol: tuple[Tokenizer, object]) -> None:
    # `pre = smollm` splits every numeric character off before the GPT-2 regex (llama.cpp's rule,
    # and the Digits pre-tokenizer of SmolLM's own tokenizer.json). transformers' GGUF path applies
    # only the GPT-2 regex, which differs where spaces precede a numeral: there a space run stays
    # whole, and a space before a non-ASCII numeral is not merged with it.
    ours, ref = smol
    ids = ours.encode(" ٤")
    assert ours.id_to_token(ids[0]) == "Ġ" and ours.decode(ids) == " ٤"
    assert [ours.id_to_token(i) for i in ours.encode("a  3")] == ["a", "ĠĠ", "3"]
    assert [ours.id_to_token(i) for i in ref.encode("a  3")] == ["a", "Ġ", "Ġ", "3"]
    assert [ours.decode([i]) for i in ours.encode("2024")] == ["2", "0", "2", "4"]


# ---- GGUF vocabularies from metadata -------------------------------------------------------
def _byte_level_meta(pre: str | None) -> dict[str, object]:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens = ["<|endoftext|>", "<think>", *alphabet, "12", "123", "Ġa", "Ġab", "Ġabc"]
    merges = ["1 2", "12 3", "Ġ a", "Ġa b", "Ġab c"]
    meta: dict[str, object] = {
        "model": "gpt2", "tokens": tokens, "merges": merges,
        "token_type": [3, 4] + [1] * (len(tokens) - 2), "eos_token_id": 0,
    }
    if pre is not None:
        meta["pre"] = pre
    return meta


@pytest.mark.parametrize(
    "pre,pieces",
    [
        ("llama-bpe", ["123", "45", "Ġabc"]),
        ("qwen2", ["1", "2", "3", "4", "5", "Ġabc"]),
        ("smollm", ["1", "2", "3", "4", "5", "Ġabc"]),
        ("gpt2", ["12345", "Ġabc"]),
        (None, ["12345", "Ġabc"]),
    ],
)
def test_gguf_pre_tokenizer_styles(pre: str | None, pieces: list[str]) -> None:
    tok = Tokenizer.from_gguf(_byte_level_meta(pre))
    got = [p for p, _ in tok.backend.pre_tokenizer.pre_tokenize_str("12345 abc")]
    assert got == pieces
    ids = tok.encode("12345 abc<think>x<|endoftext|>")
    assert tok.decode(ids) == "12345 abc<think>x"  # user-defined decodes, control is skipped
    assert tok.token_to_id("<think>") in ids and 0 in tok.eos_token_ids


def test_gguf_unknown_pre_warns() -> None:
    with pytest.warns(UserWarning, match="made-up"):
        tok = Tokenizer.from_gguf(_byte_level_meta("made-up"))
    assert [p for p, _ in tok.backend.pre_tokenizer.pre_tokenize_str("12345 abc")] == ["12345", "Ġabc"]


def test_gguf_metadata_keys_with_prefix() -> None:
    meta = {f"tokenizer.ggml.{k}": v for k, v in _byte_level_meta("gpt2").items()}
    meta["tokenizer.chat_template"] = "{{ messages[0]['content'] }}"
    tok = Tokenizer.from_gguf(meta)
    assert tok.apply_chat_template([{"role": "user", "content": "hey"}]) == "hey"


def test_gguf_unsupported_tokenizer_model() -> None:
    for meta in ({"model": "bert", "tokens": ["a"]}, {"model": "gpt2"}):
        with pytest.raises(CheckpointError) as e:
            Tokenizer.from_gguf(meta)
        assert "\n" not in str(e.value) and ("bert" in str(e.value) or "tokens" in str(e.value))


SPM_PIECES = ["▁", "h", "e", "l", "o", "w", "r", "d", "a", "t", "▁h", "ll", "he", "llo", "hello",
              "▁hello", "▁w", "or", "orl", "orld", "world", "▁world", "▁t", "▁the", "th", "the", "▁a"]


@pytest.fixture(scope="module")
def spm_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Llama-2 style SentencePiece vocabulary: <unk>, <s>, </s>, 256 byte tokens, pieces with
    scores (earlier = higher), no merges -- as llama.cpp writes it."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + SPM_PIECES
    path = tmp_path_factory.mktemp("spm") / "spm.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(SPM_PIECES))
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(SPM_PIECES))])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_sentencepiece(spm_gguf: Path) -> None:
    tok = Tokenizer.from_gguf(GGUFCheckpoint(spm_gguf).tokenizer_metadata())

    def pieces(text: str) -> list[str | None]:
        return [tok.id_to_token(i) for i in tok.encode(text)]

    # BOS by default for SentencePiece; a "▁" prefix; unknown characters as UTF-8 byte tokens.
    assert pieces("the world") == ["<s>", "▁the", "▁world"]
    assert pieces("héllo") == ["<s>", "▁h", "<0xC3>", "<0xA9>", "llo"]
    # As llama.cpp (and SentencePiece on each text run): the prefix comes back after a special token.
    assert pieces("world<s>the") == ["<s>", "▁world", "<s>", "▁the"]
    assert pieces(" hello") == ["<s>", "▁", "▁h", "e", "llo"]
    for text in ("the world", "héllo  wörld\n日本", " hello", "a\tb"):
        assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("hello</s>"), skip_special_tokens=False) == "<s> hello</s>"
    assert tok.eos_token_ids == {2} and tok.all_special_ids == [0, 1, 2]


def test_gguf_sentencepiece_matches_transformers(spm_gguf: Path) -> None:
    # Where SentencePiece conventions agree (no leading space, no special tokens in the text).
    tok = Tokenizer.from_gguf(GGUFCheckpoint(spm_gguf).tokenizer_metadata())
    ref = transformers.AutoTokenizer.from_pretrained(spm_gguf.parent, gguf_file=spm_gguf.name)
    for text in ("hello world", "the world", "hello  world", "héllo", "a\nb", "tattoo", "日本", "hello</s>"):
        assert tok.encode(text) == ref.encode(text), text
        assert tok.decode(tok.encode(text)) == ref.decode(ref.encode(text), skip_special_tokens=True)


# ---- Hugging Face folders ------------------------------------------------------------------
TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}\n"
    "  {% if m['role'] == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}\n"
    "  {% if loop.index > 3 %}{% break %}{% endif %}\n"
    "<|{{ m['role'] }}|>{{ m['content'] | trim }}{{ eos_token }}\n"
    "{% endfor %}\n"
    "{% if tools %}TOOLS:{{ tools | tojson }}\n{% endif %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _write_hf_tokenizer(folder: Path, *, config: dict[str, object], post_bos: bool = True) -> None:
    corpus = [text for text in TEXTS if text] * 5
    tok = RustTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<s>", "</s>", "<|eot_id|>"], show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    if post_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
        )
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


@pytest.fixture
def hf_folder(tmp_path: Path) -> Path:
    _write_hf_tokenizer(
        tmp_path,
        config={
            "bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
            "eos_token": "</s>",
            "chat_template": TEMPLATE,
            "added_tokens_decoder": {"500": {"content": "<tool>", "special": True}},
        },
    )
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2]}))
    return tmp_path


def test_hf_folder_matches_transformers(hf_folder: Path) -> None:
    ours = Tokenizer.from_hf_folder(hf_folder)
    ref = transformers.AutoTokenizer.from_pretrained(hf_folder)
    assert ours.add_bos_token  # from the post-processor, as the config does not say
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref.encode(text), text
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True)
    chat = CHATS[1] + [{"role": "assistant", "content": "  6  "}]
    tools = [{"name": "calc", "description": "rechner für Ausdrücke <b>"}]
    for gen in (True, False):
        text = ours.apply_chat_template(chat, add_generation_prompt=gen, tools=tools)
        assert text == ref.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen, tools=tools)
        assert ours.encode_chat(chat, add_generation_prompt=gen, tools=tools) == list(
            ref.apply_chat_template(chat, add_generation_prompt=gen, tools=tools, return_dict=False)
        )
    assert "für" in ours.apply_chat_template(CHATS[0], tools=tools)  # tojson keeps non-ASCII


def test_hf_folder_special_tokens(hf_folder: Path) -> None:
    tok = Tokenizer.from_hf_folder(hf_folder)
    assert tok.token_to_id("<tool>") == 500 and 500 in tok.all_special_ids
    assert tok.encode("a<tool>", add_special_tokens=False)[-1] == 500
    assert tok.bos_token_id == 0 and tok.eos_token_id == 1
    assert tok.eos_token_ids == {1, 2}  # eos, generation_config list, <|eot_id|>


def test_hf_folder_template_file_and_add_bos(tmp_path: Path) -> None:
    _write_hf_tokenizer(
        tmp_path, config={"bos_token": "<s>", "add_bos_token": False, "chat_template": "unused"}
    )
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    tok = Tokenizer.from_hf_folder(tmp_path)
    assert not tok.add_bos_token and tok.encode("hi")[0] != 0
    assert tok.apply_chat_template(CHATS[0]) == "[Hi there]"


def test_hf_folder_without_tokenizer_json(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        Tokenizer.from_hf_folder(tmp_path)


def test_chat_template_errors(hf_folder: Path) -> None:
    tok = Tokenizer.from_hf_folder(hf_folder)
    with pytest.raises(RequestError) as e:
        tok.apply_chat_template([{"role": "tool", "content": "x"}])
    assert "tool messages are not supported" in str(e.value) and "\n" not in str(e.value)

    tok.chat_template, tok._compiled = None, None
    with pytest.raises(RequestError, match="no chat template"):
        tok.encode_chat(CHATS[0])

    tok.chat_template = "{% for %}"
    with pytest.raises(CheckpointError, match="chat template"):
        tok.apply_chat_template(CHATS[0])


def test_open_user_turn_needs_a_template_that_writes_the_message(hf_folder: Path) -> None:
    tok = Tokenizer.from_hf_folder(hf_folder)
    whole = tok.apply_chat_template(CHATS[0], add_generation_prompt=False)
    assert whole.startswith(tok.decode(tok.encode_open_user_turn("Hi"), skip_special_tokens=False))
    tok.chat_template, tok._compiled = "{% for m in messages %}[{{ m.role }}]{% endfor %}", None
    with pytest.raises(RequestError, match="no open user turn"):
        tok.encode_open_user_turn("Hi")


def test_added_token_roundtrip_without_config(tmp_path: Path) -> None:
    # A bare tokenizer.json: no BOS from the post-processor, no config files at all.
    _write_hf_tokenizer(tmp_path, config={}, post_bos=False)
    (tmp_path / "tokenizer_config.json").unlink()
    tok = Tokenizer.from_hf_folder(tmp_path)
    assert not tok.add_bos_token and tok.bos_token_id is None and tok.eos_token_ids == {2}
    tok.backend.add_special_tokens([AddedToken("<x>", special=True)])
    assert tok.decode(tok.encode("a<x>b"), skip_special_tokens=False) == "a<x>b"

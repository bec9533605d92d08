"""Tokenizer: a Rust ``tokenizers.Tokenizer`` plus the special-token and chat-template metadata
that Hugging Face keeps beside it (``tokenizer_config.json``) or llama.cpp keeps in a GGUF.

BOS handling: we encode with the backend's post-processor switched off and prepend BOS
ourselves when the model asks for it (``add_bos_token``). Causal-LM post-processors only ever add
BOS, so this is equivalent, and it keeps one rule for HF folders and GGUF files alike.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as RustTokenizer

from updraft.errors import CheckpointError, RequestError

# Tokens that end an assistant turn in common chat formats; generation stops on them too when
# the vocabulary has them as special tokens (ChatML, Llama 3, Phi-3, Gemma, GPT-2 style).
END_OF_TURN_TOKENS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
)

# llama.cpp token types (tokenizer.ggml.token_type).
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

# Pre-tokenizer split regexes, as llama.cpp and the original HF tokenizers define them.
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# `tokenizer.ggml.pre` values -> split style. StarCoder-lineage vocabularies (SmolLM among them)
# split every digit apart, then apply the GPT-2 regex.
_PRE_STYLES = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe"), "llama3"),
    **dict.fromkeys(("qwen2", "stablelm2", "deepseek-r1-qwen", "megrez"), "qwen2"),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"), "digits"
    ),
    **dict.fromkeys(("default", "gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais"), "gpt2"),
}


class Tokenizer:
    """Text <-> token ids, chat templating and the model's special tokens.

    Build with :meth:`from_hf_folder` or :meth:`from_gguf`.
    """

    def __init__(
        self,
        backend: RustTokenizer,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        unk_token: str | None = None,
        pad_token: str | None = None,
        add_bos_token: bool = False,
        chat_template: str | None = None,
        extra_eos_token_ids: Iterable[int] = (),
    ) -> None:
        self.backend = backend
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.unk_token = unk_token
        self.pad_token = pad_token
        self.add_bos_token = add_bos_token and self.bos_token_id is not None
        self.chat_template = chat_template
        self._compiled: jinja2.Template | None = None
        self._special_ids = {
            i for i, tok in backend.get_added_tokens_decoder().items() if tok.special
        }
        for tok in (bos_token, eos_token, unk_token, pad_token):
            tid = self._token_id(tok)
            if tid is not None:
                self._special_ids.add(tid)
        eos: set[int] = set(int(i) for i in extra_eos_token_ids)
        if self.eos_token_id is not None:
            eos.add(self.eos_token_id)
        for tok in END_OF_TURN_TOKENS:
            tid = backend.token_to_id(tok)
            if tid is not None and tid in self._special_ids:
                eos.add(tid)
        self._eos_ids = eos

    # ---- ids -------------------------------------------------------------------------------
    def _token_id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    @property
    def bos_token_id(self) -> int | None:
        return self._token_id(self.bos_token)

    @property
    def eos_token_id(self) -> int | None:
        """The primary EOS id (the tokenizer's ``eos_token``)."""
        return self._token_id(self.eos_token)

    @property
    def pad_token_id(self) -> int | None:
        return self._token_id(self.pad_token)

    @property
    def eos_token_ids(self) -> set[int]:
        """Every id that ends generation: EOS, the generation config's EOS list, and end-of-turn
        tokens (``<|im_end|>``, ``<|eot_id|>``, ...) that this vocabulary has."""
        return set(self._eos_ids)

    def add_eos_token_ids(self, ids: Iterable[int]) -> None:
        """Also stop on ``ids`` (e.g. the model config's ``eos_token_id`` list)."""
        self._eos_ids.update(int(i) for i in ids)

    @property
    def all_special_ids(self) -> list[int]:
        """Ids of special tokens (control tokens, BOS/EOS/UNK/PAD), sorted."""
        return sorted(self._special_ids)

    @property
    def vocab_size(self) -> int:
        """Number of tokens including added ones (the model's embedding may be larger)."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def id_to_token(self, i: int) -> str | None:
        """The token string of id ``i`` as the vocabulary spells it, or None if out of range."""
        return self.backend.id_to_token(int(i))

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    # ---- text ------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens``, BOS first if the model wants it.
        Special tokens written in the text (``<|im_start|>``) become their ids."""
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos_token:
            bos = self.bos_token_id
            assert bos is not None
            return [bos, *ids]
        return list(ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; special tokens are dropped unless ``skip_special_tokens`` is False."""
        if type(ids) is list:  # the engine's case: ints already (a per-id int() costs ~40%)
            try:
                return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)
            except TypeError:  # other number types: convert as below
                pass
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    # ---- chat ------------------------------------------------------------------------------
    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """Render ``messages`` with the model's chat template, as transformers does (same jinja
        environment and globals; ``tools``/``documents`` default to None; extra ``kwargs`` are
        template variables). A template that rejects the conversation raises RequestError."""
        if not self.chat_template:
            raise RequestError("this model has no chat template; send a plain-text prompt instead")
        if self._compiled is None:
            try:
                self._compiled = _jinja_env().from_string(self.chat_template)
            except jinja2.TemplateError as e:
                raise CheckpointError(f"the model's chat template does not compile: {e}") from e
        variables: dict[str, Any] = {
            "bos_token": self.bos_token or "",
            "eos_token": self.eos_token or "",
            "tools": None,
            "documents": None,
        }
        for name in ("unk_token", "pad_token"):
            if getattr(self, name) is not None:
                variables[name] = getattr(self, name)
        variables.update(kwargs)
        try:
            return self._compiled.render(
                messages=messages, add_generation_prompt=add_generation_prompt, **variables
            )
        except jinja2.TemplateError as e:
            msg = " ".join(str(e).split())
            raise RequestError(f"chat template rejected the conversation: {msg}") from e

    def encode_chat(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **kwargs: Any
    ) -> list[int]:
        """Token ids of the rendered chat. The template writes BOS itself where it wants one,
        so none is added."""
        text = self.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, **kwargs)
        return self.encode(text, add_special_tokens=False)

    def encode_open_user_turn(self, opener: str = "", **kwargs: Any) -> list[int]:
        """Token ids of a chat whose only turn is the user's, left open after ``opener``: what
        the model continues AS the user (training prompts the target writes itself). The
        template renders a one-message chat around a marker and the text is cut there, so the
        template's own system prompt and turn markup come first, exactly as in a real chat."""
        marker = "\x00open-turn\x00"
        text = self.apply_chat_template([{"role": "user", "content": marker}], add_generation_prompt=False, **kwargs)
        if marker not in text:
            raise RequestError("the chat template does not write the user's message as given: no open user turn")
        return self.encode(text[: text.index(marker)] + opener, add_special_tokens=False)

    # ---- constructors ----------------------------------------------------------------------
    @classmethod
    def from_hf_folder(cls, path: str | Path) -> Tokenizer:
        """Load ``tokenizer.json`` with ``tokenizer_config.json`` (special tokens, added tokens,
        ``add_bos_token``, chat template), ``chat_template.jinja`` and ``generation_config.json``
        when present."""
        folder = Path(path)
        tok_file = folder / "tokenizer.json"
        if not tok_file.is_file():
            raise CheckpointError(
                f"{folder}: no tokenizer.json (sentencepiece-only tokenizers are not supported)"
            )
        try:
            backend = RustTokenizer.from_file(str(tok_file))
        except Exception as e:
            raise CheckpointError(f"{tok_file}: unreadable tokenizer ({_first_line(e)})") from e
        cfg = _read_json(folder / "tokenizer_config.json")
        special_map = _read_json(folder / "special_tokens_map.json")

        # Added tokens that tokenizer_config lists but tokenizer.json lacks.
        decoder = cfg.get("added_tokens_decoder") or {}
        for _id, entry in sorted(decoder.items(), key=lambda kv: int(kv[0])):
            content = entry.get("content") if isinstance(entry, dict) else None
            if content and backend.token_to_id(content) is None:
                added = AddedToken(
                    content,
                    single_word=bool(entry.get("single_word", False)),
                    lstrip=bool(entry.get("lstrip", False)),
                    rstrip=bool(entry.get("rstrip", False)),
                    normalized=bool(entry.get("normalized", not entry.get("special", False))),
                    special=bool(entry.get("special", False)),
                )
                if added.special:
                    backend.add_special_tokens([added])
                else:
                    backend.add_tokens([added])

        def special(name: str) -> str | None:
            return _token_str(cfg.get(name)) or _token_str(special_map.get(name))

        bos = special("bos_token")
        add_bos = cfg.get("add_bos_token")
        if not isinstance(add_bos, bool):
            # Not stated: do what tokenizer.json's post-processor does.
            add_bos = _post_processor_adds(backend, bos)

        template = _hf_chat_template(folder, cfg)
        gen = _read_json(folder / "generation_config.json")
        gen_eos = gen.get("eos_token_id")
        extra_eos = gen_eos if isinstance(gen_eos, list) else ([gen_eos] if gen_eos is not None else [])
        return cls(
            backend,
            bos_token=bos,
            eos_token=special("eos_token"),
            unk_token=special("unk_token"),
            pad_token=special("pad_token"),
            add_bos_token=add_bos,
            chat_template=template,
            extra_eos_token_ids=[int(i) for i in extra_eos],
        )

    @classmethod
    def from_gguf(cls, metadata: Mapping[str, Any]) -> Tokenizer:
        """Build from GGUF tokenizer metadata: the ``tokenizer.ggml.*`` keys (with or without that
        prefix, as ``GGUFCheckpoint.tokenizer_metadata`` returns them) and ``chat_template``.

        Supports ``tokenizer.ggml.model`` ``gpt2`` (byte-level BPE with merges) and ``llama``
        (SentencePiece BPE with scores and byte fallback)."""
        meta = {
            k.removeprefix("tokenizer.ggml.").removeprefix("tokenizer."): v
            for k, v in metadata.items()
        }
        kind = meta.get("model")
        tokens = meta.get("tokens")
        if not tokens:
            raise CheckpointError("GGUF file has no tokenizer vocabulary (tokenizer.ggml.tokens)")
        if kind not in ("gpt2", "llama"):
            raise CheckpointError(f"unsupported GGUF tokenizer model {kind!r}; supported: gpt2, llama")
        types = list(meta.get("token_type") or [_NORMAL] * len(tokens))
        if len(types) != len(tokens):
            raise CheckpointError(
                f"GGUF tokenizer has {len(tokens)} tokens but {len(types)} token types"
            )
        if kind == "gpt2":
            backend = _byte_level_bpe(tokens, meta.get("merges") or [], meta.get("pre"))
        else:
            backend = _sentencepiece_bpe(
                tokens, types, meta.get("scores"), meta.get("unknown_token_id"),
                bool(meta.get("add_space_prefix", True)),
            )
        # CONTROL (and UNKNOWN) tokens are special: matched whole in text and skipped when
        # decoding; USER_DEFINED ones are matched whole but decoded as text.
        special = [t for t, ty in zip(tokens, types, strict=True) if ty in (_CONTROL, _UNKNOWN)]
        user = [t for t, ty in zip(tokens, types, strict=True) if ty == _USER_DEFINED]
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
        backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])

        def tok(key: str) -> str | None:
            i = meta.get(key)
            return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

        # llama.cpp adds BOS to SentencePiece vocabularies that do not say otherwise.
        add_bos = meta.get("add_bos_token")
        extra_eos = [int(meta[k]) for k in ("eot_token_id", "eom_token_id") if meta.get(k) is not None]
        return cls(
            backend,
            bos_token=tok("bos_token_id"),
            eos_token=tok("eos_token_id"),
            unk_token=tok("unknown_token_id"),
            pad_token=tok("padding_token_id"),
            add_bos_token=bool(add_bos) if add_bos is not None else kind == "llama",
            chat_template=meta.get("chat_template"),
            extra_eos_token_ids=extra_eos,
        )


# ---- GGUF vocabularies ---------------------------------------------------------------------
def _first_ids(tokens: Sequence[str]) -> dict[str, int]:
    # A few GGUF vocabularies repeat a string (padding slots); keep its first id.
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    return vocab


def _byte_level_bpe(tokens: Sequence[str], merges: Sequence[str], pre: str | None) -> RustTokenizer:
    """GPT-2 style byte-level BPE. Tokens are already spelt in the byte-to-unicode alphabet."""
    pairs = []
    for m in merges:
        left, sep, right = m.partition(" ")
        if sep:
            pairs.append((left, right))
    backend = RustTokenizer(models.BPE(_first_ids(tokens), pairs, fuse_unk=False, byte_fallback=False))
    style = _PRE_STYLES.get(pre or "default")
    if style is None:
        warnings.warn(
            f"unknown GGUF pre-tokenizer {pre!r}; using the GPT-2 split rules", stacklevel=3
        )
        style = "gpt2"
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if style == "gpt2":
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif style == "digits":
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    else:
        split = _LLAMA3_SPLIT if style == "llama3" else _QWEN2_SPLIT
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False), byte_level]
        )
        if style == "qwen2":
            backend.normalizer = normalizers.NFC()  # as Qwen2's own tokenizer.json
    backend.decoder = decoders.ByteLevel()
    return backend


def _sentencepiece_bpe(
    tokens: Sequence[str],
    types: Sequence[int],
    scores: Sequence[float] | None,
    unk_id: int | None,
    add_space_prefix: bool,
) -> RustTokenizer:
    """Llama-2 style SentencePiece BPE: spaces spelt ``▁``, a ``▁`` prefixed to each text run
    (llama.cpp and SentencePiece both do that after every special token, too), unknown
    characters spelt as ``<0xNN>`` byte tokens.

    GGUF stores per-token scores instead of merges. SentencePiece merges the adjacent pair whose
    result has the highest score, so each token's possible splits become merges ranked by the
    token's score."""
    if scores is None or len(scores) != len(tokens):
        raise CheckpointError("GGUF SentencePiece vocabulary needs one tokenizer.ggml.scores entry per token")
    vocab = _first_ids(tokens)
    candidates: list[tuple[float, int, int, str, str]] = []
    for i, (tok, ty) in enumerate(zip(tokens, types, strict=True)):
        if ty != _NORMAL or len(tok) < 2 or vocab[tok] != i:
            continue
        for cut in range(1, len(tok)):
            left, right = tok[:cut], tok[cut:]
            if left in vocab and right in vocab:
                candidates.append((-float(scores[i]), vocab[left], vocab[right], left, right))
    candidates.sort()
    unk = tokens[int(unk_id)] if unk_id is not None else None
    backend = RustTokenizer(
        models.BPE(
            vocab, [(c[3], c[4]) for c in candidates], unk_token=unk, fuse_unk=True, byte_fallback=True
        )
    )
    steps = [normalizers.Replace(" ", "\u2581")]
    if add_space_prefix:
        steps.insert(0, normalizers.Prepend("\u2581"))
    backend.normalizer = normalizers.Sequence(steps)
    dec = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        dec.append(decoders.Strip(" ", 1, 0))
    backend.decoder = decoders.Sequence(dec)
    return backend


# ---- helpers -------------------------------------------------------------------------------
def _jinja_env() -> ImmutableSandboxedEnvironment:
    """The environment transformers renders chat templates in."""

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: int | None = None,
        separators: tuple[str, str] | None = None, sort_keys: bool = False,
    ) -> str:
        # Jinja's own tojson HTML-escapes; templates expect plain JSON.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def _post_processor_adds(backend: RustTokenizer, bos: str | None) -> bool:
    bos_id = backend.token_to_id(bos) if bos else None
    if bos_id is None:
        return False
    with_special = backend.encode("a", add_special_tokens=True).ids
    return bool(with_special) and with_special[0] == bos_id and len(with_special) > len(
        backend.encode("a", add_special_tokens=False).ids
    )


def _hf_chat_template(folder: Path, cfg: Mapping[str, Any]) -> str | None:
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = cfg.get("chat_template") or _read_json(folder / "chat_template.json").get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None


def _token_str(value: Any) -> str | None:
    # tokenizer_config writes special tokens as strings or as serialised AddedTokens.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: invalid JSON ({_first_line(e)})") from e
    return data if isinstance(data, dict) else {}


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:160] if lines else type(e).__name__

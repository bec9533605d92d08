"""Token maps: the frequent target token ids an EAGLE-1 head drafts from (FR-Spec; SGLang's
``--speculative-token-map``).

A map is a file of distinct target token ids: a ``.pt`` / ``.pth`` tensor (or list) as SGLang
reads it, a JSON list, or plain text (ids separated by whitespace or commas). With a map the
head's LM head is evaluated over those rows only (``EagleHead.set_token_map``); a 32k map over a
128k vocabulary cuts the LM head, the largest matmul of an 8B-shape draft step, to a quarter.
Drafts stay target ids and verification is the target's, so outputs do not change: greedy
output equals plain greedy, and sampled drafts carry their distribution over target ids (zero
outside the map), which keeps rejection sampling lossless. Tokens outside the map are never
drafted, which costs acceptance only where the target would have picked one.

Build one from token counts (the most frequent ids)::

    python -m updraft.spec.token_map --size 32768 --out map.pt --tokens ids.pt [more files]
    python -m updraft.spec.token_map --size 32768 --out map.pt --text corpus.txt --model MODEL
    python -m updraft.spec.token_map --size 32768 --out map.pt --counts counts.pt

``--counts``: a tensor of per-id counts over the vocabulary; ``--tokens``: token id files
(formats as above); ``--text``: text files tokenised line by line with ``--model``'s tokenizer.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from updraft.config import ConfigError

TENSOR_SUFFIXES = (".pt", ".pth", ".bin")


def read_token_ids(path: str | Path, what: str = "speculative token map") -> torch.Tensor:
    """Token ids of a ``.pt`` / ``.json`` / text file as a 1-D int64 tensor (not validated
    against a vocabulary). Bad files raise ``ConfigError`` naming the file and the bad value."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} {path} not found")
    try:
        if p.suffix in TENSOR_SUFFIXES:
            value: Any = torch.load(str(p), map_location="cpu", weights_only=True)
        elif p.suffix == ".json":
            value = json.loads(p.read_text())
        else:
            value = [t for t in re.split(r"[\s,]+", p.read_text()) if t]
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} {path} is not valid JSON: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - any reader error becomes one clear line
        raise ConfigError(f"{what} {path} cannot be read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return _as_ids(value, path, what)


def _as_ids(value: Any, path: str | Path, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
            raise ConfigError(f"{what} {path} holds a {value.dtype} tensor: expected integer token ids")
        if value.dim() != 1:
            raise ConfigError(f"{what} {path} holds a tensor of shape {tuple(value.shape)}: expected a 1-D list of token ids")
        return value.long()
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{what} {path} holds a {type(value).__name__}: expected a list of token ids")
    ids: list[int] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise ConfigError(f"{what} {path}: entry {item!r} is not an integer token id")
        try:
            ids.append(int(item))
        except ValueError:
            raise ConfigError(f"{what} {path}: entry {item!r} is not an integer token id") from None
    return torch.tensor(ids, dtype=torch.long)


def load_token_map(path: str | Path, vocab_size: int) -> torch.Tensor:
    """The map's token ids (int64, in file order), checked: not empty, every id in
    ``[0, vocab_size)``, no id twice."""
    ids = read_token_ids(path)
    if ids.numel() == 0:
        raise ConfigError(f"speculative token map {path} is empty: give at least one token id")
    bad = ids[(ids < 0) | (ids >= vocab_size)]
    if bad.numel():
        raise ConfigError(
            f"speculative token map {path}: token id {int(bad[0])} is outside the target vocabulary [0, {vocab_size})"
        )
    uniq, counts = torch.unique(ids, return_counts=True)
    if uniq.numel() != ids.numel():
        raise ConfigError(f"speculative token map {path}: token id {int(uniq[counts > 1][0])} appears more than once")
    return ids


def most_frequent(counts: torch.Tensor, size: int) -> torch.Tensor:
    """The ``size`` most frequent ids of per-id ``counts`` (ties: lower id first), ascending;
    ids never seen fill the rest in id order."""
    if size < 1:
        raise ConfigError(f"token map size={size} is invalid: must be >= 1")
    order = torch.argsort(-counts.double(), stable=True)  # stable: equal counts keep id order
    return order[: min(size, counts.numel())].sort().values


def save_token_map(ids: torch.Tensor, path: str | Path) -> Path:
    """Write ``ids`` as ``.pt`` (int64 tensor, what SGLang reads), ``.json`` or text, by suffix."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    ids = ids.detach().long().cpu()
    if p.suffix in TENSOR_SUFFIXES:
        torch.save(ids, str(p))
    elif p.suffix == ".json":
        p.write_text(json.dumps(ids.tolist()) + "\n")
    else:
        p.write_text("\n".join(map(str, ids.tolist())) + "\n")
    return p


def count_tokens(vocab_size: int, token_files: Sequence[str] = (), text_files: Sequence[str] = (),
                 tokenizer: Any = None) -> torch.Tensor:
    """Per-id counts over token id files and text files (tokenised with ``tokenizer``)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for f in token_files:
        ids = read_token_ids(f, "token file")
        bad = ids[(ids < 0) | (ids >= vocab_size)]
        if bad.numel():
            raise ConfigError(f"token file {f}: token id {int(bad[0])} is outside the vocabulary [0, {vocab_size})")
        counts += torch.bincount(ids, minlength=vocab_size)
    if text_files:
        if tokenizer is None:
            raise ConfigError("--text needs --model (whose tokenizer counts the tokens)")
        for f in text_files:
            for line in Path(f).read_text().splitlines():
                ids = [i for i in tokenizer.encode(line, add_special_tokens=False) if 0 <= i < vocab_size]
                if ids:
                    counts += torch.bincount(torch.tensor(ids), minlength=vocab_size)
    return counts


def _target_tokenizer(model: str) -> tuple[Any, int]:
    """``model``'s tokenizer and vocabulary size (an HF folder reads only its tokenizer and
    config; a GGUF file is loaded whole, fine for the small models it is used for)."""
    from updraft.models.resolve import resolve_model

    path = resolve_model(model)
    if path.is_dir() and (path / "config.json").is_file():
        from updraft.tokenizer import Tokenizer

        return Tokenizer.from_hf_folder(path), int(json.loads((path / "config.json").read_text())["vocab_size"])
    from updraft.models.loader import load_checkpoint

    loaded = load_checkpoint(path, dtype=torch.float32, device="cpu", progress=False)
    return loaded.tokenizer, loaded.config.vocab_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m updraft.spec.token_map", description="Build a token map (the most frequent token ids) for --speculative-token-map.")
    ap.add_argument("--out", required=True, help="output file: .pt (int64 tensor), .json or .txt")
    ap.add_argument("--size", type=int, default=32768, help="token ids to keep (default 32768)")
    ap.add_argument("--vocab-size", type=int, default=None, help="target vocabulary size (default: --model's, else from --counts)")
    ap.add_argument("--counts", default=None, help="per-id counts over the vocabulary (.pt tensor, .json or .txt list)")
    ap.add_argument("--tokens", nargs="*", default=[], help="token id files to count (.pt / .json / .txt)")
    ap.add_argument("--text", nargs="*", default=[], help="text files to tokenise with --model and count")
    ap.add_argument("--model", default=None, help="the target model (tokenizer and vocabulary size)")
    args = ap.parse_args(argv)
    try:
        if args.counts is not None:
            counts = read_token_ids(args.counts, "counts file")
        else:
            if not args.tokens and not args.text:
                raise ConfigError("give --counts, --tokens or --text to count tokens from")
            tokenizer, vocab = _target_tokenizer(args.model) if args.model else (None, args.vocab_size)
            vocab = args.vocab_size or vocab
            if vocab is None:
                raise ConfigError("give --vocab-size or --model (the target vocabulary size)")
            counts = count_tokens(vocab, args.tokens, args.text, tokenizer)
        ids = most_frequent(counts, args.size)
        save_token_map(ids, args.out)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    seen = int((counts > 0).sum())
    print(f"wrote {ids.numel()} token ids to {args.out} ({seen} of {counts.numel()} ids seen; "
          f"the map covers {float(counts[ids].sum()) / max(1.0, float(counts.sum())):.1%} of the counted tokens)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

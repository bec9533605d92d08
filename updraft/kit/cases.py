"""Attention test cases as data, and the sweeps the kit runs.

A case fixes everything one attention forward depends on: mode, head layout, page size, the
per-request prefix and extend lengths, dtype, the KV slot layout, whether a tree mask is used and
how much room the request table leaves past the longest sequence (0: a request at exactly the
table width, failure class 11).

Tiers (``eager_cases`` / ``graph_cases``): ``full`` is what ``updraft kit run`` runs on the device
(the whole sweep eagerly; a graph sweep that meets every length set, layout, page size, head
layout and dtype); ``quick`` is a covering subset small enough for CI under the Triton interpreter.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from updraft.batch import ForwardMode

LAYOUTS = ("contiguous", "shuffled", "interleaved", "nonmonotonic")
HEAD_LAYOUTS = {"mha": (4, 4), "gqa4": (8, 2), "mqa": (4, 1)}
DTYPES = ("float32", "bfloat16")
#: Maximum relative error (max |out - ref| / max |ref|) against the float64 reference.
TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 5e-3}


@dataclass(frozen=True)
class AttnCase:
    mode: ForwardMode
    num_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    prefix_lens: tuple[int, ...]
    extend_lens: tuple[int, ...]
    dtype: str = "float32"
    layout: str = "contiguous"
    tree: bool = False  # a random tree mask inside the block (TARGET_VERIFY with topk > 1)
    seed: int = 0
    #: Columns of ``req_to_token`` past the longest sequence. 0 puts the longest request at
    #: exactly the table width (failure class 11: graph backends size their metadata from it).
    table_slack: int = 8

    def __post_init__(self) -> None:
        if len(self.prefix_lens) != len(self.extend_lens):
            raise ValueError("prefix_lens and extend_lens must have one entry per request")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r} not in {LAYOUTS}")
        if self.mode.is_fixed_stride(include_v2=True) and len(set(self.extend_lens)) > 1:
            raise ValueError(f"{self.mode.name} needs equal extend lengths, got {self.extend_lens}")
        if self.mode.is_decode() and not self.tree and any(e != 1 for e in self.extend_lens):
            raise ValueError(f"{self.mode.name} has one token per request")
        if self.table_slack < 0:
            raise ValueError(f"table_slack must be >= 0, got {self.table_slack}")

    @property
    def batch_size(self) -> int:
        return len(self.prefix_lens)

    @property
    def seq_lens(self) -> tuple[int, ...]:
        return tuple(p + e for p, e in zip(self.prefix_lens, self.extend_lens))

    @property
    def stride(self) -> int:
        return self.extend_lens[0] if self.mode.is_fixed_stride(include_v2=True) else 0

    @property
    def name(self) -> str:
        heads = f"h{self.num_heads}kv{self.num_kv_heads}d{self.head_dim}"
        lens = "+".join(f"{p}:{e}" for p, e in zip(self.prefix_lens, self.extend_lens))
        tree = "-tree" if self.tree else ""
        exact = "-exactwidth" if self.table_slack == 0 else ""
        return f"{self.mode.name}-{heads}-p{self.page_size}-{self.dtype}-{self.layout}{tree}{exact}-[{lens}]"


def _length_sets(mode: ForwardMode, page: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(prefix_lens, extend_lens) pairs around page boundaries, single tokens, empty prefixes,
    and mixed batches, shaped for ``mode``."""
    around = [page - 1, page, page + 1] if page > 1 else [15, 16, 17]
    if mode.is_decode():
        return [((0,), (1,)), ((around[0],), (1,)), (tuple(around), (1, 1, 1)), ((around[2], 3, 0, 40), (1, 1, 1, 1))]
    if mode.is_fixed_stride(include_v2=True):  # TARGET_VERIFY, DRAFT_EXTEND_V2
        return [((0,), (4,)), ((around[0],), (4,)), (tuple(around), (4, 4, 4)), ((around[2], 1, 33), (6, 6, 6))]
    # EXTEND and DRAFT_EXTEND (v1, packed, variable lengths)
    return [
        ((0,), (1,)),
        ((0,), (around[1],)),
        ((around[0],), (1,)),
        (tuple(around), (around[0], 1, around[2])),
        ((0, 5, around[1], 31, 32, 33), (7, 1, 3, around[2], 2, 1)),
    ]


def sweep(
    modes: list[ForwardMode],
    *,
    dtypes: tuple[str, ...] = DTYPES,
    page_sizes: tuple[int, ...] = (1, 16),
    layouts: tuple[str, ...] = LAYOUTS,
    head_layouts: tuple[str, ...] = tuple(HEAD_LAYOUTS),
    head_dim: int = 32,
    trees: bool = True,
) -> list[AttnCase]:
    """The cross product the kit runs (modes x heads x dtype x page size x layout x lengths)."""
    cases = []
    for mode, dtype, page, layout, heads in itertools.product(modes, dtypes, page_sizes, layouts, head_layouts):
        hq, hkv = HEAD_LAYOUTS[heads]
        for i, (prefix, ext) in enumerate(_length_sets(mode, page)):
            cases.append(AttnCase(mode, hq, hkv, head_dim, page, prefix, ext, dtype, layout, seed=i))
        if trees and mode == ForwardMode.TARGET_VERIFY:
            cases.append(AttnCase(mode, hq, hkv, head_dim, page, (page + 1, 3), (5, 5), dtype, layout, tree=True))
    return cases


TIERS = ("quick", "full")
#: (layout, page size, head layout, dtype) combinations the covering subsets rotate through, so
#: that every layout, both page sizes, every head layout and both dtypes appear.
_ROTATION = (
    ("shuffled", 1, "gqa4", "float32"),
    ("interleaved", 16, "mqa", "bfloat16"),
    ("nonmonotonic", 1, "mha", "float32"),
    ("contiguous", 16, "gqa4", "bfloat16"),
)


def _case(mode: ForwardMode, combo: tuple[str, int, str, str], prefix: tuple[int, ...], ext: tuple[int, ...],
          seed: int, head_dim: int = 32, **kw: object) -> AttnCase:
    layout, page, heads, dtype = combo
    hq, hkv = HEAD_LAYOUTS[heads]
    return AttnCase(mode, hq, hkv, head_dim, page, prefix, ext, dtype, layout, seed=seed, **kw)  # type: ignore[arg-type]


def eager_cases(mode: ForwardMode, tier: str) -> list[AttnCase]:
    """Cases of the ``eager`` column. ``full``: the whole sweep (+ an exact-width case);
    ``quick``: every length set of the mode once, each with the next (layout, page, heads,
    dtype) combination, plus a tree case for TARGET_VERIFY and an exact-width case."""
    _check_tier(tier)
    if tier == "full":
        cases = sweep([mode])
    else:
        cases = []
        for page in (1, 16):
            for i, (prefix, ext) in enumerate(_length_sets(mode, page)):
                combo = _ROTATION[(i + (page > 1)) % len(_ROTATION)]
                if combo[1] == page:
                    cases.append(_case(mode, combo, prefix, ext, seed=i))
        if mode == ForwardMode.TARGET_VERIFY:
            cases.append(_case(mode, _ROTATION[0], (17, 3), (5, 5), seed=7, tree=True))
    cases.append(_exact_width_case(mode))
    return cases


def graph_cases(mode: ForwardMode, tier: str) -> list[AttnCase]:
    """Cases of the ``graph-metadata`` and ``graph`` columns (no tree masks: graph replay refuses
    them). ``full``: every length set of the mode with two (layout, page, heads, dtype)
    combinations, plus an exact-width case; ``quick``: one mixed batch around a page boundary
    (for the packed v1 extend: accept-length-like extends) and the exact-width case."""
    _check_tier(tier)
    if tier == "quick":
        if mode.is_decode():
            prefix, ext = (15, 16, 17), (1, 1, 1)
        elif mode.is_fixed_stride(include_v2=True):
            prefix, ext = (15, 16, 17), (4, 4, 4)
        else:
            prefix, ext = (15, 16, 33, 0), (1, 4, 2, 3)
        return [_case(mode, ("interleaved", 1, "mqa", "bfloat16"), prefix, ext, seed=5), _exact_width_case(mode)]
    cases = []
    for page in (1, 16):
        for i, (prefix, ext) in enumerate(_length_sets(mode, page)):
            combo = next(c for c in _ROTATION[(i + page) % len(_ROTATION) :] + _ROTATION if c[1] == page)
            cases.append(_case(mode, combo, prefix, ext, seed=i))
    cases.append(_exact_width_case(mode))
    return cases


def _exact_width_case(mode: ForwardMode) -> AttnCase:
    """A mixed batch whose longest request ends exactly at the table width (failure class 11)."""
    if mode.is_decode():
        prefix, ext = (31, 4, 0), (1, 1, 1)
    elif mode.is_fixed_stride(include_v2=True):
        prefix, ext = (28, 4, 0), (4, 4, 4)
    else:
        prefix, ext = (20, 4, 0), (12, 1, 5)
    return _case(mode, ("shuffled", 16, "gqa4", "float32"), prefix, ext, seed=11, table_slack=0)


def _check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise ValueError(f"tier {tier!r} not in {TIERS}")

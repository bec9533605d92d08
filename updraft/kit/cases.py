"""Attention test cases as data, and the sweeps the kit runs.

A case fixes everything one attention forward depends on: mode, head layout, page size, the
per-request prefix and extend lengths, dtype, the KV slot layout and whether a tree mask is used.
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

    def __post_init__(self) -> None:
        if len(self.prefix_lens) != len(self.extend_lens):
            raise ValueError("prefix_lens and extend_lens must have one entry per request")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r} not in {LAYOUTS}")
        if self.mode.is_fixed_stride(include_v2=True) and len(set(self.extend_lens)) > 1:
            raise ValueError(f"{self.mode.name} needs equal extend lengths, got {self.extend_lens}")
        if self.mode.is_decode() and not self.tree and any(e != 1 for e in self.extend_lens):
            raise ValueError(f"{self.mode.name} has one token per request")

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
        return f"{self.mode.name}-{heads}-p{self.page_size}-{self.dtype}-{self.layout}{tree}-[{lens}]"


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

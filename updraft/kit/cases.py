"""Attention test cases as data, and the sweeps the kit runs.

A case fixes everything one attention forward depends on: mode, head layout, page size, the
per-request prefix and extend lengths, dtype, the KV slot layout, whether a tree mask is used and
how much room the request table leaves past the longest sequence (0: a request at exactly the
table width, failure class 11).

Head layouts come in two families: ``standard`` (K and V per KV head, each in its own buffer:
MHA, GQA, MQA) and ``mla`` (DeepSeek's latent cache: one KV row of ``kv_lora_rank + rope_dim``
columns per token, V its first ``kv_lora_rank``, stored once: ``KVPool(shared_kv=True)``). A
backend runs the families it serves (``AttentionBackend.separate_kv`` / ``v_layouts``).

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
#: MLA layouts: (query heads, kv_lora_rank, rope_dim). ``mla`` is small (the interpreter runs it);
#: ``mla576`` has DeepSeek-V2-Lite's widths (16 heads, 512 + 64), in the full tier.
MLA_LAYOUTS = {"mla": (8, 32, 16), "mla576": (16, 512, 64)}
FAMILIES = ("standard", "mla")
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
    #: V's width (0: ``head_dim``); with ``shared_kv`` V is K's first ``v_head_dim`` columns
    #: (MLA's latent cache, one KV head).
    v_head_dim: int = 0
    shared_kv: bool = False

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
        if self.shared_kv and (self.num_kv_heads != 1 or not 0 < self.v_head_dim < self.head_dim):
            raise ValueError(
                f"a shared latent cache has one KV head and 0 < v_head_dim < head_dim: kv heads {self.num_kv_heads}, "
                f"v_head_dim {self.v_head_dim}, head_dim {self.head_dim}"
            )

    @property
    def dv(self) -> int:
        """V's (and the output's) width."""
        return self.v_head_dim or self.head_dim

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
        if self.shared_kv:
            heads = f"h{self.num_heads}mla{self.dv}+{self.head_dim - self.dv}"
        elif self.dv != self.head_dim:
            heads += f"v{self.dv}"
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
        hf = head_fields(heads, head_dim)
        for i, (prefix, ext) in enumerate(_length_sets(mode, page)):
            cases.append(AttnCase(mode, page_size=page, prefix_lens=prefix, extend_lens=ext, dtype=dtype, layout=layout,
                                  seed=i, **hf))  # type: ignore[arg-type]
        if trees and mode == ForwardMode.TARGET_VERIFY:
            cases.append(AttnCase(mode, page_size=page, prefix_lens=(page + 1, 3), extend_lens=(5, 5), dtype=dtype,
                                  layout=layout, tree=True, **hf))  # type: ignore[arg-type]
    return cases


def head_fields(heads: str, head_dim: int = 32) -> dict[str, int | bool]:
    """AttnCase's head fields for a named layout (``HEAD_LAYOUTS``, or ``MLA_LAYOUTS``, whose
    widths are their own: ``head_dim`` is ignored there)."""
    if heads in MLA_LAYOUTS:
        h, rank, rope = MLA_LAYOUTS[heads]
        return dict(num_heads=h, num_kv_heads=1, head_dim=rank + rope, v_head_dim=rank, shared_kv=True)
    hq, hkv = HEAD_LAYOUTS[heads]
    return dict(num_heads=hq, num_kv_heads=hkv, head_dim=head_dim)


def _family_heads(family: str, heads: str) -> str:
    """The family's head layout in a rotation slot (MLA has one small layout: every slot)."""
    if family not in FAMILIES:
        raise ValueError(f"head family {family!r} not in {FAMILIES}")
    return "mla" if family == "mla" else heads


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
          seed: int, head_dim: int = 32, family: str = "standard", **kw: object) -> AttnCase:
    layout, page, heads, dtype = combo
    hf = head_fields(_family_heads(family, heads), head_dim)
    return AttnCase(mode, page_size=page, prefix_lens=prefix, extend_lens=ext, dtype=dtype, layout=layout, seed=seed,
                    **hf, **kw)  # type: ignore[arg-type]


def eager_cases(mode: ForwardMode, tier: str, family: str = "standard") -> list[AttnCase]:
    """Cases of the ``eager`` column for a head ``family``. ``full``: the whole sweep (+ an
    exact-width case; for MLA also every length set at the real 512 + 64 widths); ``quick``:
    every length set of the mode once, each with the next (layout, page, heads, dtype)
    combination, plus a tree case for TARGET_VERIFY and an exact-width case."""
    _check_tier(tier)
    _family_heads(family, "")
    if tier == "full":
        cases = sweep([mode], head_layouts=("mla",) if family == "mla" else tuple(HEAD_LAYOUTS))
        if family == "mla":
            cases += _real_mla_cases(mode)
    else:
        cases = []
        for page in (1, 16):
            for i, (prefix, ext) in enumerate(_length_sets(mode, page)):
                combo = _ROTATION[(i + (page > 1)) % len(_ROTATION)]
                if combo[1] == page:
                    cases.append(_case(mode, combo, prefix, ext, seed=i, family=family))
        if mode == ForwardMode.TARGET_VERIFY:
            cases.append(_case(mode, _ROTATION[0], (17, 3), (5, 5), seed=7, tree=True, family=family))
    cases.append(_exact_width_case(mode, family))
    return cases


def _real_mla_cases(mode: ForwardMode) -> list[AttnCase]:
    """Every length set of ``mode`` once at DeepSeek-V2-Lite's widths (16 heads, 512 + 64),
    rotating layout / page size / dtype; a tree case for TARGET_VERIFY."""
    cases = []
    for page in (1, 16):
        for i, (prefix, ext) in enumerate(_length_sets(mode, page)):
            layout, _, _, dtype = _ROTATION[(i + 2 * (page > 1)) % len(_ROTATION)]
            cases.append(_case(mode, (layout, page, "mla576", dtype), prefix, ext, seed=20 + i))
    if mode == ForwardMode.TARGET_VERIFY:
        cases.append(_case(mode, ("interleaved", 16, "mla576", "bfloat16"), (33, 2), (5, 5), seed=29, tree=True))
    return cases


def graph_cases(mode: ForwardMode, tier: str, family: str = "standard") -> list[AttnCase]:
    """Cases of the ``graph-metadata`` and ``graph`` columns for a head ``family`` (no tree masks:
    graph replay refuses them). ``full``: every length set of the mode with two (layout, page,
    heads, dtype) combinations, plus an exact-width case (for MLA one case per length set at the
    real widths too); ``quick``: one mixed batch around a page boundary (for the packed v1
    extend: accept-length-like extends) and the exact-width case."""
    _check_tier(tier)
    _family_heads(family, "")
    if tier == "quick":
        if mode.is_decode():
            prefix, ext = (15, 16, 17), (1, 1, 1)
        elif mode.is_fixed_stride(include_v2=True):
            prefix, ext = (15, 16, 17), (4, 4, 4)
        else:
            prefix, ext = (15, 16, 33, 0), (1, 4, 2, 3)
        return [_case(mode, ("interleaved", 1, "mqa", "bfloat16"), prefix, ext, seed=5, family=family),
                _exact_width_case(mode, family)]
    cases = []
    for page in (1, 16):
        for i, (prefix, ext) in enumerate(_length_sets(mode, page)):
            combo = next(c for c in _ROTATION[(i + page) % len(_ROTATION) :] + _ROTATION if c[1] == page)
            cases.append(_case(mode, combo, prefix, ext, seed=i, family=family))
    cases.append(_exact_width_case(mode, family))
    if family == "mla":
        cases += [c for c in _real_mla_cases(mode) if not c.tree]
    return cases


def _exact_width_case(mode: ForwardMode, family: str = "standard") -> AttnCase:
    """A mixed batch whose longest request ends exactly at the table width (failure class 11)."""
    if mode.is_decode():
        prefix, ext = (31, 4, 0), (1, 1, 1)
    elif mode.is_fixed_stride(include_v2=True):
        prefix, ext = (28, 4, 0), (4, 4, 4)
    else:
        prefix, ext = (20, 4, 0), (12, 1, 5)
    return _case(mode, ("shuffled", 16, "gqa4", "float32"), prefix, ext, seed=11, table_slack=0, family=family)


def _check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise ValueError(f"tier {tier!r} not in {TIERS}")

"""A TTGIR post-pass: the PDL wait moved below the software pipeline's prologue.

Why: a decode program's first latent tiles come from DRAM (~1 us) after its PDL wait, while the
kernel before it finishes. The cached rows were written steps ago, so their copies could start
before the wait, as a CUDA kernel issues them (``benchmarks/cuda/mla_decode.cu``: 1.0 us a
forward at bs 8 / 8k, H100, 2026-12-06). Triton cannot express it: its pipeliner puts the
prologue's copies right before the loop, after everything the source wrote before the loop (the
wait, the query load), and it leaves a loop holding ``tt.grid_dependency_wait`` unpipelined.

What: a kernel that marks its wait with ``ops.triton_utils.pdl_wait_value`` (an inline asm whose
int32 result, 0, every load that must follow the wait adds to its address) gets, after
``make_ttgir``, every statement between that wait and the first loop that does NOT depend on the
wait's result (through SSA) moved above the wait, in order: the prologue's slot loads and async
copies, their address and mask arithmetic, the buffers' allocations. Statements that use the
result (the query load and what follows from it) stay after it. The pass refuses (the module
left as it was, still correct, only without early copies) when a statement to move is not plain
arithmetic, a load, an async copy, an allocation or a view, or when a moved load or copy reads
through a kernel argument outside the kernel's list of what may be read before the wait.

Correctness is the kernel's side of the contract: every address it may read before the wait holds
data older than the kernel right before it (``ops.triton_utils``: when this kernel starts, every
kernel before that one has completed), and every read of the previous kernel's output depends on
the wait's value. ``mla_decode`` keeps its first blocks to cached rows for that reason.

Installed as triton's ``add_stages_inspection_hook`` (chained after any hook already set) when
this module is imported; only kernels named in ``SINKABLE`` are touched. Triton 3.6 (the GPU
machine's) and 3.9 (CI's) both call it; 3.7+ also asks it for a cache key.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

#: The wait as ``pdl_wait_value`` writes it (either PDL form).
MARKERS = ("griddepcontrol.wait; mov.u32 $0, 0;", "griddepcontrol.wait; griddepcontrol.launch_dependents; mov.u32 $0, 0;")
#: Kernel name -> the arguments its moved statements may read (see the module docstring).
SINKABLE: dict[str, frozenset[str]] = {
    "_mla_decode_kernel": frozenset({"KPool", "ReqToToken", "SeqLens", "ReqPoolIdx"}),
}
_MOVABLE = re.compile(
    r"(arith\.|math\.|tt\.(splat|broadcast|expand_dims|make_range|addptr|load|reshape|trans)$|"
    r"ttg\.(async_copy_global_to_local|async_commit_group|local_alloc|memdesc_index|memdesc_subslice|convert_layout)$)"
)
_READS = ("tt.load", "ttg.async_copy_global_to_local")
_NAME = re.compile(r"%[A-Za-z0-9_$.]+")
_OP = re.compile(r"\s*(?:%[^=\"]*=\s*)?\"?([a-z_]+\.[a-z_.0-9]+)")


@dataclass(frozen=True)
class Statement:
    """One top-level operation of a block: lines ``[first, last]`` of the module text."""

    first: int
    last: int
    op: str
    defs: frozenset[str]
    uses: frozenset[str]


def _statement(lines: list[str], first: int, last: int) -> Statement:
    head = lines[first]
    text = "\n".join(lines[first:last + 1])
    m = re.match(r"\s*(%[^=\"]*)=", head)
    defs = frozenset(n for n in _NAME.findall(m.group(1))) if m else frozenset()
    body = text[m.end():] if m else text
    uses = frozenset(_NAME.findall(body)) - defs
    op = _OP.match(head)
    return Statement(first, last, op.group(1) if op else "?", defs, uses)


def _block(lines: list[str], start: int) -> list[Statement]:
    """The statements from line ``start`` to the end of its block (same indentation)."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    out: list[Statement] = []
    first = start
    for i in range(start + 1, len(lines) + 1):
        ln = lines[i] if i < len(lines) else ""
        depth = len(ln) - len(ln.lstrip())
        if i == len(lines) or (ln.strip() and (depth < indent or (depth == indent and ln.strip()[0] not in "})^"))):
            out.append(_statement(lines, first, i - 1))
            first = i
            if i == len(lines) or depth < indent:
                break
    return out


def _pointer_arguments(lines: list[str], name: str) -> frozenset[str]:
    head = next((ln for ln in lines if "tt.func" in ln and f"@{name}(" in ln), "")
    return frozenset(re.findall(r"(%[A-Za-z0-9_$.]+): !tt\.ptr", head))


def sink(text: str, kernel: str, readable: frozenset[str]) -> tuple[str | None, str]:
    """``(the module text with the wait sunk, or None: left as it is; what was done or why not)``."""
    lines = text.split("\n")
    wait = next((i for i, ln in enumerate(lines) if any(m in ln for m in MARKERS)), None)
    if wait is None:
        return None, "no pdl_wait_value in the kernel"
    block = _block(lines, wait)
    loop = next((k for k, s in enumerate(block) if s.op == "scf.for"), None)
    if loop is None:
        return None, "no loop after the wait"
    args = _pointer_arguments(lines, kernel)
    allowed = {f"%{a}" for a in readable}
    defined = {d: s for s in _block(lines, _first_statement(lines, wait)) for d in s.defs}
    after, waited, moved = [block[0]], set(block[0].defs), []
    for s in block[1:loop]:
        if s.uses & waited:
            after.append(s)
            waited |= s.defs
            continue
        if not _MOVABLE.match(s.op):
            return None, f"cannot move {s.op} above the wait (line {s.first + 1})"
        if s.op in _READS:
            bases = _argument_bases(s, defined, args)
            if not bases <= allowed:
                return None, f"{s.op} at line {s.first + 1} reads {sorted(bases - allowed)} before the wait"
        moved.append(s)
    if not any(s.op == "ttg.async_copy_global_to_local" for s in moved):
        return None, "no async copy to move"
    out = lines[:block[0].first]
    for s in moved + after:
        out += lines[s.first:s.last + 1]
    out += lines[block[loop].first:]
    return "\n".join(out), f"{len(moved)} of {loop - 1} statements moved above the wait"


def _first_statement(lines: list[str], line: int) -> int:
    """The first statement of the block holding ``line``: just after its ``tt.func`` line."""
    return next(i for i in range(line, -1, -1) if "tt.func" in lines[i]) + 1


def _argument_bases(s: Statement, defined: dict[str, Statement], args: frozenset[str]) -> set[str]:
    """The kernel's pointer arguments whose values flow into ``s`` (its address, mask and offsets)."""
    seen: set[str] = set()
    todo = list(s.uses)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in defined:
            todo += defined[name].uses
    return {n for n in seen if n in args}


# ---- the triton hook ------------------------------------------------------------------------
_KEY = "updraft-pdl-sink-1"  # a new pass version must change this (triton 3.7+ caches by it)
_previous: list[Callable[..., object] | None] = [None]


def _after_ttgir(stage: Callable[..., object]) -> Callable[..., object]:
    def run(src: object, metadata: dict) -> object:
        mod = stage(src, metadata)
        name = mod.get_entry_func_name() if hasattr(mod, "get_entry_func_name") else ""
        if name not in SINKABLE:
            return mod
        text, _ = sink(mod.str(), name, SINKABLE[name])
        if text is None:
            return mod
        from triton._C.libtriton import ir

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, f"{name}.ttgir")
            with open(path, "w") as f:
                f.write(text)
            new = ir.parse_mlir_module(path, mod.context)
        new.context = mod.context
        return new

    return run


def _hook(*args: object) -> object:
    prev = _previous[0]
    if not args:  # triton 3.7+: the cache key of the pipeline this hook makes
        key, digest = prev() if prev is not None else ("", "")  # type: ignore[misc]
        return f"{key}-{_KEY}", f"{digest}{_KEY}"
    if prev is not None:
        prev(*args)
    stages = args[1]
    if isinstance(stages, dict) and "ttgir" in stages:
        stages["ttgir"] = _after_ttgir(stages["ttgir"])
    return None


def install() -> None:
    """Set the hook (once per process; kept after any hook another library set)."""
    from triton import knobs

    current = knobs.runtime.add_stages_inspection_hook
    if current is _hook:
        return
    _previous[0] = current
    knobs.runtime.add_stages_inspection_hook = _hook

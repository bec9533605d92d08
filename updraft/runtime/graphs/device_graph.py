"""Graph handles: a real CUDA graph, and a CPU emulator with the same capture/replay interface.

The emulator makes the graph machinery testable without a GPU. ``capture`` runs the callable
once and records a snapshot of everything the graph would freeze: every host-side value (ints,
floats, bools, strings, enums, tuples) reachable from the watched objects (the static
``ForwardBatch`` and the backend's forward metadata), and the identity, data pointer, shape,
strides and dtype of every tensor they hold. ``replay`` takes the snapshot again and raises
``GraphDivergenceError`` naming the first difference: a replay-init that recomputed a Python
scalar, or rebound a tensor instead of copying into it, is a real-graph bug (failure classes 6
and 10) even though an eager re-run would hide it. Replay then re-runs the callable over the
static buffers and copies the results INTO the captured output tensors, so outputs alias
exactly as on a real graph (failure class 7).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import torch


class GraphDivergenceError(AssertionError):
    """Replay would run a graph whose frozen host values or buffers no longer match capture."""


def snapshot(obj: Any, path: str = "", out: dict[str, Any] | None = None, depth: int = 0) -> dict[str, Any]:
    """Flatten ``obj`` into {path: frozen value}. Tensors are recorded by identity and layout,
    not contents (contents are what a replay is allowed to change)."""
    out = {} if out is None else out
    if depth > 8:
        return out
    if isinstance(obj, torch.Tensor):
        out[path] = ("tensor", id(obj), obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), obj.dtype, str(obj.device))
    elif obj is None or isinstance(obj, (bool, int, float, str, enum.Enum)):
        out[path] = obj
    elif isinstance(obj, (list, tuple)):
        out[path] = (type(obj).__name__, len(obj))
        for i, v in enumerate(obj):
            snapshot(v, f"{path}[{i}]", out, depth + 1)
    elif isinstance(obj, dict):
        out[path] = ("dict", tuple(sorted(map(str, obj))))
        for k, v in obj.items():
            snapshot(v, f"{path}.{k}", out, depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out[path] = ("dataclass", type(obj).__name__)
        for f in dataclasses.fields(obj):
            if f.metadata.get("graph_exempt"):
                continue
            snapshot(getattr(obj, f.name), f"{path}.{f.name}", out, depth + 1)
    else:
        out[path] = ("object", type(obj).__name__, id(obj))
    return out


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<missing>") != b.get(key, "<missing>"):
            return f"{key or '<root>'}: captured {a.get(key, '<missing>')!r}, replay {b.get(key, '<missing>')!r}"
    return ""


def _copy_into(dst: Any, src: Any) -> None:
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (list, tuple)):
        for d, s in zip(dst, src):
            _copy_into(d, s)
    elif dataclasses.is_dataclass(dst) and not isinstance(dst, type):
        for f in dataclasses.fields(dst):
            _copy_into(getattr(dst, f.name), getattr(src, f.name))


class EmulatedGraph:
    """CPU stand-in for a CUDA graph (see the module docstring)."""

    emulated = True

    def __init__(self) -> None:
        self._fn: Callable[[], Any] | None = None
        self._watch: Callable[[], Any] | None = None
        self._frozen: dict[str, Any] = {}
        self.output: Any = None

    def capture(self, fn: Callable[[], Any], watch: Callable[[], Any]) -> Any:
        self._fn, self._watch = fn, watch
        self._frozen = snapshot(watch())
        self.output = fn()
        return self.output

    def replay(self) -> None:
        assert self._fn is not None and self._watch is not None, "replay before capture"
        now = snapshot(self._watch())
        if now != self._frozen:
            raise GraphDivergenceError("graph replay diverges from capture: " + _diff(self._frozen, now))
        _copy_into(self.output, self._fn())


class CudaGraph:
    """A captured ``torch.cuda.CUDAGraph`` sharing a memory pool with its siblings."""

    emulated = False

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.graph = torch.cuda.CUDAGraph()
        self.output: Any = None

    def capture(self, fn: Callable[[], Any], watch: Callable[[], Any]) -> Any:
        del watch  # a real graph freezes everything by construction
        with torch.cuda.graph(self.graph, pool=self.pool):
            self.output = fn()
        return self.output

    def replay(self) -> None:
        self.graph.replay()


def new_pool(emulate: bool) -> Any:
    """One memory pool per model (target and draft never share: a draft graph overwriting the
    target's pool gave illegal addresses in production)."""
    return None if emulate else torch.cuda.graph_pool_handle()


def make_graph(emulate: bool, pool: Any) -> EmulatedGraph | CudaGraph:
    return EmulatedGraph() if emulate else CudaGraph(pool)

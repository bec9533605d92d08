"""The Triton interpreter made faster and position-independent: one language patch per launch for
its device-function calls, and ``tl.dot`` summed the same way for every output element
(``_position_independent_dot``).

CPU runs of the Triton kernels (the CPU test suite, ``updraft kit run --device cpu``) go through
the interpreter (``TRITON_INTERPRET=1``). It patches ``triton.language`` (``inspect.getmembers``
over its modules, ~1 ms) on every launch and AGAIN on every call of a ``@triton.jit`` helper from
a running kernel. Within one launch nothing restores what a helper's patch set (the launch
restores its own patch when it ends, after every program ran), so repeating the patch for the
same language modules changes nothing: after ``install()`` a helper call patches only a set of
modules not yet patched in this launch. Under our kernels (``pdl_enter``, the slot loaders, the
sampling helpers, triton's own ``tl.sum`` / ``tl.cumsum``) the repeated patches were about half
of the interpreter's time: the CPU suite took 1,166 s of tests before, 909 s after (2 cores).

Like the interpreter's own patching (module attributes set for a launch and restored after it),
this is per process and not thread-safe: kernels are interpreted from one thread at a time.

Installed where the interpreter is on (``tests/conftest.py``, the kit's CLI and its spawned
workers); nothing changes on CUDA runs. If triton's internals differ from what this expects
(``GridExecutor``, ``InterpretedFunction``, ``_patch_lang``), ``install`` changes nothing and the
interpreter runs as slowly as before.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from updraft.ops import interpreting


def install() -> bool:
    """Patch the interpreter in place (once per process) when ``TRITON_INTERPRET=1``; False where
    nothing was changed (not interpreting, already installed, or an unknown interpreter layout)."""
    if not interpreting():
        return False
    try:
        import triton.language as tl
        from triton.runtime import interpreter as ti
    except ImportError:  # pragma: no cover
        return False
    needed = ("GridExecutor", "InterpretedFunction", "_patch_lang", "InterpreterError")
    if not all(hasattr(ti, n) for n in needed) or getattr(ti, "_updraft_patched", False):
        return False
    langs = (tl, tl.core)
    done: set[frozenset[int]] = set()  # language module sets patched in the running launch

    keys: dict[Any, frozenset[int]] = {}  # per jit function (hashed by identity): its language modules

    def key(fn: Any) -> frozenset[int]:
        k = keys.get(fn)
        if k is None:
            k = keys[fn] = frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in langs)
        return k

    launch = ti.GridExecutor.__call__

    def grid_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        done.clear()
        done.add(key(self.fn))  # the launch patches its kernel's modules itself, first thing
        try:
            return launch(self, *args, **kwargs)
        finally:
            done.clear()

    def device_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        k = key(self.fn)
        if k not in done:
            ti._patch_lang(self.fn)
            done.add(k)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise ti.InterpreterError(repr(e)) from e

    ti.GridExecutor.__call__ = grid_call
    ti.InterpretedFunction.__call__ = device_call
    _position_independent_dot(ti)
    ti._updraft_patched = True
    return True


def _position_independent_dot(ti: Any) -> None:
    """``tl.dot`` of float operands as ``np.einsum`` instead of the interpreter's ``np.matmul``.

    ``np.matmul`` hands float32 to the BLAS numpy ships, whose kernels for a tile's edge rows and
    columns sum in another order than its main block on some CPUs (AMD EPYC here): two identical
    weight rows then give different fp32 logits, so a tie broke to the later index, and a row's
    sums depended on which rows shared its launch. On the GPU every output element of an MMA
    sums the same way. ``einsum`` (unoptimised: its own loops) sums every element over K in one
    order, so results depend on the values alone, as the kernels' tests assume (ties to the
    first index, split rows equal to unsplit). 8-bit float operands keep the interpreter's path."""
    builder = getattr(ti, "InterpreterBuilder", None)
    dot = getattr(builder, "create_dot", None)
    if dot is None:
        return

    def create_dot(self: Any, a: Any, b: Any, d: Any, *args: Any) -> Any:
        acc = d.data.dtype
        fp8 = any(t.dtype.primitive_bitwidth == 8 and t.dtype.is_floating() for t in (a, b))
        if fp8 or acc.kind != "f":
            return dot(self, a, b, d, *args)
        prod = np.einsum("...ik,...kj->...ij", a.data.astype(acc, copy=False), b.data.astype(acc, copy=False))
        return ti.TensorHandle(prod + d.data, d.dtype.scalar)

    builder.create_dot = create_dot

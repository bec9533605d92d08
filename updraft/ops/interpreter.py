"""One language patch per launch for the Triton interpreter's device-function calls.

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
    ti._updraft_patched = True
    return True

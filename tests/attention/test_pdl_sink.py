"""``attention.triton_kernels.pdl_sink``: the TTGIR pass that moves a kernel's PDL wait below its
pipeline's prologue, on module text shaped like triton's (the real kernel's compile is checked by
``compile_check``, under both tritons: it fails when the early form's copies stay after the wait)."""

from __future__ import annotations

import pytest

from updraft.attention.triton_kernels import pdl_sink

WAIT = ('    %ready = tt.elementwise_inline_asm "griddepcontrol.wait; mov.u32 $0, 0;" {constraints = "=r,r", '
        'packed_element = 1 : i32, pure = false} %s : i32 -> i32 loc(#loc3)')
HEAD = ("  tt.func public @k(%Q: !tt.ptr<bf16> {tt.divisibility = 16 : i32} loc(\"Q\"(#loc)), %KPool: !tt.ptr<bf16> "
        "loc(\"KPool\"(#loc)), %T: !tt.ptr<i32>, %Out: !tt.ptr<bf16>, %n: i32) attributes {noinline = false} {")


def module(*body: str) -> str:
    return "\n".join(["#loc = loc(\"k.py\":1:0)", "module {", HEAD, "    %c0 = arith.constant 0 : i32",
                      "    %c1 = arith.constant 1 : i32", "    %s = tt.load %T : !tt.ptr<i32>", WAIT, *body,
                      "    %r = scf.for %i = %c0 to %n step %c1 iter_args(%a = %qv) -> (bf16)  : i32 {",
                      "      %x = arith.addf %a, %a : bf16", "      scf.yield %x : bf16", "    } loc(#loc4)",
                      "    tt.return loc(#loc5)", "  } loc(#loc6)", "} loc(#loc)"])


PROLOGUE = [
    "    %q = tt.addptr %Q, %ready : !tt.ptr<bf16>, i32",
    "    %qv = tt.load %q : !tt.ptr<bf16>",
    "    %k = tt.addptr %KPool, %s : !tt.ptr<bf16>, i32",
    "    %buf = ttg.local_alloc : () -> !ttg.memdesc<64xbf16, #shared, #smem, mutable>",
    "    %cp = ttg.async_copy_global_to_local %k, %buf : tensor<64x!tt.ptr<bf16>> -> <64xbf16, #shared, #smem, mutable>",
    "    %g = ttg.async_commit_group tokens %cp",
    '    %m:2 = "tt.reduce"(%qv) <{axis = 0 : i32}> ({',
    "    ^bb0(%u: f32, %v: f32):",
    "      %w = arith.addf %u, %v : f32",
    "      tt.reduce.return %w : f32",
    "    }) : (tensor<16xf32>) -> f32",
]
READABLE = frozenset({"KPool", "T"})


def body_order(text: str) -> list[str]:
    lines = text.split("\n")
    start = next(i for i, ln in enumerate(lines) if "%s = tt.load" in ln) + 1
    end = next(i for i, ln in enumerate(lines) if "scf.for" in ln)
    return [ln.split("=")[0].strip() for ln in lines[start:end] if ln.startswith("    %")]


def test_independent_statements_move_above_the_wait_in_order() -> None:
    out, msg = pdl_sink.sink(module(*PROLOGUE), "k", READABLE)
    assert out is not None, msg
    assert body_order(out) == ["%k", "%buf", "%cp", "%g", "%ready", "%q", "%qv", "%m:2"]
    assert msg == "4 of 7 statements moved above the wait"
    # a multi-line statement (its region) travels whole, and nothing else changes
    assert sorted(out.split("\n")) == sorted(module(*PROLOGUE).split("\n"))


@pytest.mark.parametrize("extra, why", [
    ("    %st = tt.store %k, %c0 : !tt.ptr<bf16>", "cannot move tt.store"),
    ("    %o = tt.addptr %Out, %s : !tt.ptr<bf16>, i32\n    %ov = tt.load %o : !tt.ptr<bf16>", "reads ['%Out']"),
])
def test_the_module_is_left_alone_when_a_move_is_unsafe(extra: str, why: str) -> None:
    out, msg = pdl_sink.sink(module(*PROLOGUE, *extra.split("\n")), "k", READABLE)
    assert out is None and why in msg


def test_nothing_to_do() -> None:
    assert pdl_sink.sink(module(*PROLOGUE).replace("griddepcontrol.wait", "nop"), "k", READABLE)[0] is None
    without_copy = [ln for ln in PROLOGUE if "async" not in ln]
    assert pdl_sink.sink(module(*without_copy), "k", READABLE) == (None, "no async copy to move")
    # a copy through an argument the kernel does not list stays after the wait
    assert pdl_sink.sink(module(*PROLOGUE), "k", frozenset({"T"}))[0] is None


def test_hook_chains_and_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed once, after a hook someone else set, which still runs; triton 3.7+ also asks it
    (no arguments) for the pipeline's cache key."""
    from triton import knobs

    calls: list[int] = []

    def other(*args: object) -> object:
        calls.append(len(args))
        return ("o", "1") if not args else None

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", other)
    monkeypatch.setattr(pdl_sink, "_previous", [None])
    pdl_sink.install()
    pdl_sink.install()
    hook = knobs.runtime.add_stages_inspection_hook
    assert hook is pdl_sink._hook and pdl_sink._previous[0] is other
    key, digest = hook()  # type: ignore[misc]
    assert key.startswith("o-") and pdl_sink._KEY in key and digest.startswith("1")
    stages = {"ttgir": lambda src, md: src, "llir": lambda src, md: src}
    hook(None, stages, None, None, 90)  # type: ignore[misc]
    assert calls == [0, 5] and stages["ttgir"] is not None and stages["llir"](3, {}) == 3

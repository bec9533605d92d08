"""Helpers shared by the Triton kernels of ``updraft.ops``: bf16 rounding and launch widths.

The kernels round intermediates to the tensor dtype exactly where the unfused torch code rounds
(round to nearest, ties to even, as every GPU conversion does). Triton's CPU interpreter does not:
it converts float32 to bfloat16 by truncating the mantissa (triton 3.x ``_convert_float``), which
would make every interpreted bf16 result up to an ulp low and hide real rounding bugs behind a
loose tolerance. ``round_to`` therefore rounds to nearest-even by hand before the cast when its
``EMULATE_RNE`` flag is set and the target is bf16; launchers set the flag only when interpreting
(``emulate_rne()``), so compiled GPU kernels keep the plain (hardware RNE) conversion.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Literal, get_args

import torch
import triton
import triton.language as tl


def emulate_rne() -> bool:
    """Whether kernels must round to bf16 by hand: only under the interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def round_to(x, dtype: tl.constexpr, EMULATE_RNE: tl.constexpr):
    """``x`` (float32) rounded to nearest-even in ``dtype`` and returned in ``dtype``."""
    if EMULATE_RNE and dtype == tl.bfloat16:
        # bf16 keeps the top 16 bits of an fp32: add half an ulp (minus one when the kept lsb is
        # 0, so ties go to even), then drop the low half; the cast below is then exact.
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + (0x7FFF + ((bits >> 16) & 1))
        x = (bits & 0xFFFF0000).to(tl.float32, bitcast=True)
    return x.to(dtype)


# ---- programmatic dependent launch (PDL) ------------------------------------------------------
# On sm_90+ a kernel launched with PDL may start while the kernel before it in the stream is still
# running (inside CUDA graphs too): its launch and, where the kernel prefetches its weights into L2
# first, its first weight reads overlap the previous kernel's tail. The contract every kernel here
# keeps (``pdl_enter`` first): NOTHING is loaded or stored before ``gdc_wait`` returns (the
# previous kernel, and by induction every earlier one, has completed and its writes are visible),
# except L2 prefetches of weights, which no kernel writes, the decode attention kernels'
# prewarm (``attention.triton_kernels.slots``: L2-only reads of metadata kernels old, used for
# prefetch addresses only) and the MLA decode's early metadata (``mla_decode``: the lengths and
# pool rows, written kernels before). ``gdc_launch_dependents`` right after
# the wait lets the next kernel start once every program of this one has passed its wait, so at
# most one kernel runs ahead. A kernel after a non-PDL kernel (cuBLAS, torch) simply waits for it.
_PDL_OVERRIDE: list[bool | None] = [None]


@functools.cache
def _major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


#: Kernel families launched with PDL by default. ``elementwise`` (RMSNorm, SiLU-mul, rotary: the
#: unfused layers' kernels between cuBLAS GEMMs) is not: H100, SmolLM2 + its EAGLE-3 head
#: (benchmarks/results/2026-11-26-h100-pdl, run 7), the bs-8 S = 5 cycle took 1.442 ms with it,
#: 1.395 without, 1.432 with PDL off; the plain step and the bs-1 cycle were the same either way.
#: ``verify_attention``: the GQA decode kernel and its merge over a verify block (more than one
#: query token per request); ``attention`` every other attention launch.
Family = Literal["gemv", "attention", "verify_attention", "sampling", "elementwise"]
FAMILIES: tuple[Family, ...] = get_args(Family)
DEFAULT_FAMILIES: tuple[Family, ...] = ("gemv", "attention", "verify_attention", "sampling")


@functools.cache
def _env_families(env: str) -> frozenset[str]:
    """The families ``UPDRAFT_PDL=env`` turns on (parsed once per value: launches read it)."""
    if env == "1":
        return frozenset(DEFAULT_FAMILIES)
    if env == "all":
        return frozenset(FAMILIES)
    return frozenset(env.split(",")) if env not in ("", "0") else frozenset()


def pdl_enabled(device: torch.device, family: Family) -> bool:
    """Whether kernels of ``family`` on ``device`` launch with PDL: CUDA sm_90+, compiled (not
    the interpreter), a family in ``DEFAULT_FAMILIES``, unless ``use_pdl`` says otherwise or
    ``UPDRAFT_PDL`` is set: 0 (off), 1 (the default families), all, or a comma list of
    families (gemv, attention, verify_attention, sampling, elementwise)."""
    if device.type != "cuda" or emulate_rne():  # emulate_rne(): the interpreter is on
        return False
    override = _PDL_OVERRIDE[0]
    if override is None:
        families = _env_families(os.environ.get("UPDRAFT_PDL", "1"))
    else:
        families = _env_families("1" if override else "0")
    if family not in families:
        return False
    return _major(device.index if device.index is not None else torch.cuda.current_device()) >= 9


def pdl_opts(device: torch.device, family: Family, late: bool = False, allowed: bool = True) -> dict[str, object]:
    """Launch keywords: the kernels' ``PDL`` constexpr (0 off; 1 on, the next kernel may launch
    once every program has passed its wait; 2 (``late``: the kernels with a main loop) on, once
    every program has reached ``pdl_release_late`` after that loop) and ``launch_pdl`` when on.
    ``allowed`` False: off whatever the family allows (a caller's own window, e.g.
    ``TritonBackend.verify_no_pdl_rows``).
    H100, 2026-11-26: releasing right after the wait made the MLA decode (two waves of programs)
    10% slower, the next kernel's programs sitting beside its second wave; late release did not."""
    if not allowed or not pdl_enabled(device, family):
        return {"PDL": 0}
    return {"PDL": 2 if late else 1, "launch_pdl": True}


@contextlib.contextmanager
def use_pdl(on: bool | None) -> Iterator[None]:
    """PDL off, or on for the default families (None: as the environment says) for launches
    inside the block (a graph keeps what was in force at capture)."""
    prev, _PDL_OVERRIDE[0] = _PDL_OVERRIDE[0], on
    try:
        yield
    finally:
        _PDL_OVERRIDE[0] = prev


@triton.jit
def pdl_enter(PDL: tl.constexpr):
    """First statement of every kernel (after index arithmetic and weight prefetches): wait for
    the previous kernel; with PDL == 1 let the next one launch at once."""
    if PDL > 0:
        tl.extra.cuda.gdc_wait()
    if PDL == 1:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def pdl_release_late(PDL: tl.constexpr):
    """PDL == 2: let the next kernel launch from here (after the main loop: its programs then
    wait less while this kernel's last wave still runs)."""
    if PDL == 2:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_l2(ptrs):
    """Prefetch the 128-byte lines holding ``ptrs`` into L2 (no registers; nothing waits on it).
    Weights only: see the PDL contract above."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


def num_warps(elements: int, per_thread: int = 8, max_warps: int = 16) -> int:
    """Warps for a program whose tile has ``elements`` values, about ``per_thread`` each: a power
    of two in ``[1, max_warps]`` (triton rejects other warp counts at compile time, and the
    interpreter ignores them, so CPU tests would not notice)."""
    want = max(1, elements // (32 * per_thread))
    return min(max_warps, 1 << (want.bit_length() - 1))

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

import os

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


def num_warps(elements: int, per_thread: int = 8, max_warps: int = 16) -> int:
    """Warps for a program whose tile has ``elements`` values, about ``per_thread`` each: a power
    of two in ``[1, max_warps]`` (triton rejects other warp counts at compile time, and the
    interpreter ignores them, so CPU tests would not notice)."""
    want = max(1, elements // (32 * per_thread))
    return min(max_warps, 1 << (want.bit_length() - 1))

"""Fused element-wise ops of the decoder layer: RMSNorm (plain and fused with the residual add),
in-place rotary embedding of q and k, and SiLU-and-mul; and ``dense``, the product of every
linear layer (``F.linear``, with a faster CPU float32 path: see ``dense.py``).

Dispatch. Each op is one function here that picks a path per call from the input's device:
CUDA tensors -> the Triton kernel (``norm``, ``rotary``, ``activation`` modules, imported lazily so
that CPU-only installs never import triton); anything else -> the pure-torch path in
``reference`` (the model's original unfused code). ``use_backend("torch" | "triton" | "auto")``
(a context manager) or the ``UPDRAFT_OPS`` environment variable overrides the choice: "torch" to
time or debug the unfused path on a GPU, "triton" to run the kernels on CPU tensors under
``TRITON_INTERPRET=1`` (tests). Under "auto" an input a kernel does not cover (float64, a
mismatched dtype, a non-contiguous last dim for the in-place rotary) takes the torch path; under
"triton" it raises instead, so a test cannot pass on the fallback by accident. The choice is
made in Python at call time: a CUDA graph captures whichever path was active when it was
captured. The override is process-global (not per thread).

Numerics. Every kernel rounds where the unfused torch code rounds, and computes in float32
between those points:

* ``rmsnorm``: mean of squares and rsqrt in fp32; the normalised value is cast to the input dtype
  *before* the weight multiply (as Hugging Face does); the output dtype is
  ``promote(x.dtype, weight.dtype)``.
* ``fused_add_rmsnorm``: ``x + residual`` is rounded to the input dtype (the new residual stream,
  returned) and that rounded sum is what gets normalised -- exactly the unfused
  ``residual = residual + x; h = norm(residual)``.
* ``rotary_``: each product (``x * cos``, ``x * sin``) is rounded to the tensor dtype, then the
  sum; the cos/sin table stays in its own dtype (the model's), as before.
* ``silu_and_mul``: silu in fp32 rounded to the dtype, then the product rounded.

With bf16/fp16 inputs a product of two values is exact in fp32, so the kernels reproduce torch's
rounding exactly except where a reduction order (the rms sum) or a hardware ``exp``/``rsqrt``
approximation moves an fp32 intermediate by an ulp, which very rarely flips a bf16 rounding. On
CPU (torch path) the model's results are bitwise those of the unfused code. Triton's interpreter
truncates fp32 -> bf16 instead of rounding to nearest-even; the kernels correct that under the
interpreter only (``triton_utils.round_to``), so CPU tests see the GPU's roundings.

Small-M GEMMs (``gemv``): at M <= 16 token rows (decode, verify, draft steps) the decoder
layer's projections run as weight-streaming Triton GEMMs with the element-wise work fused in
(``updraft.models.fused`` composes them into ~5 launches per layer). ``small_m(x)`` decides per
call from shapes, dtypes and devices only (graph-safe): on "auto" CUDA bf16/fp16 rows; on
"triton" any kernel dtype (fp32 too: CPU tests under the interpreter); never on "torch" or while
``use_fused_layers(False)`` / ``UPDRAFT_FUSED_LAYERS=0`` is in force (the unfused path, element-wise
kernels and cuBLAS, kept for side-by-side timing). Numerics: as below, except that a fused GEMM
sums in its own order (see ``gemv``).

Conventions: every op is CUDA-graph capturable (no host syncs, output sizes from shapes only, no
data-dependent launches); outputs are fresh tensors except ``rotary_``, which writes q and k in
place and returns None. The token count is only ever a grid size, never a kernel argument, so
one compiled kernel serves every batch size (no recompiles while capturing graph sizes).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from collections.abc import Iterator
from types import ModuleType

import torch

from updraft.ops import reference
from updraft.ops.dense import dense

BACKENDS = ("auto", "torch", "triton")

_backend = os.environ.get("UPDRAFT_OPS", "auto")
if _backend not in BACKENDS:
    raise ValueError(f"UPDRAFT_OPS={_backend!r}: expected one of {', '.join(BACKENDS)}")


#: Under "auto" (production) the fused layers run where they measured faster than the unfused path
#: (below); ``UPDRAFT_FUSED_LAYERS=0`` turns them off. History: on 2026-11-25 they were opt-in
#: after a test saw a bf16 Llama's fused decode "drift" and one bs-1 run accepted less (2.52 vs
#: 2.87). Both were other things: the test compared logits after different greedy picks (a
#: near-tie flipped; with the same inputs the logits agree within 1e-2, and
#: ``benchmarks/fused_drift.py`` put every stage of the fused layer at rounding level on the H100),
#: and the bs-1 figure came from a few prompts whose bf16 texts differed (bs 8-64 and adaptive S
#: accepted as much or more with the fused layers).
_fused_layers = os.environ.get("UPDRAFT_FUSED_LAYERS", "") != "0"
#: Most token rows the small-M kernels take (``gemv.MAX_M``, repeated so that deciding imports no triton).
SMALL_M = 16
_SMALL_M_DTYPES = (torch.bfloat16, torch.float16)
#: Where "auto" takes the fused layers (H100 runs of benchmarks/decode_kernels.py, 2026-11-25 run 4
#: and 2026-11-26): at most 8 token rows (decode, a 6-token verify, draft steps and extends at
#: bs 1) over activations at most 4096 wide (SmolLM2's 576 and the 8B shape's 4096: the widths
#: measured). At SmolLM2 the fused verify step was 0.94-1.00 ms against 1.03-1.07 unfused; at the
#: 8B shape, with the tuned configs of ``ops/gemv_tuned.json`` and the one-pass norm prologue,
#: decode 5.87 against 6.16-6.21 ms and verify 6.22 against 6.32-6.40 (its 6-row GEMVs are within
#: 8% of cuBLAS; the launches they save pay for it). The "triton" override (tests) keeps the
#: whole range.
AUTO_MAX_ROWS = 8
AUTO_MAX_WIDTH = 4096


def fused_layers() -> bool:
    """Whether the small-M fused layer path may run (``UPDRAFT_FUSED_LAYERS``, ``use_fused_layers``)."""
    return _fused_layers


@contextlib.contextmanager
def use_fused_layers(on: bool) -> Iterator[None]:
    """Allow (True) or forbid (False) the small-M fused layer path inside the block."""
    global _fused_layers
    previous, _fused_layers = _fused_layers, bool(on)
    try:
        yield
    finally:
        _fused_layers = previous


def small_m(x: torch.Tensor) -> bool:
    """Whether rows ``x`` [M, K] take the small-M kernels (see the module docstring)."""
    return x.dim() == 2 and small_m_rows(x.shape[0], x.dtype, x.device, x.shape[1])


def small_m_rows(rows: int, dtype: torch.dtype, device: torch.device, width: int = 0) -> bool:
    """``small_m`` for ``rows`` token rows ``width`` wide of ``dtype`` on ``device``."""
    if not _fused_layers or _backend == "torch" or not 1 <= rows <= SMALL_M:
        return False
    cuda = device.type == "cuda"
    if _backend == "auto":
        return (cuda and rows <= AUTO_MAX_ROWS and width <= AUTO_MAX_WIDTH and dtype in _SMALL_M_DTYPES
                and triton_available())
    return triton_available() and (cuda or interpreting()) and dtype in (torch.float32, *_SMALL_M_DTYPES)


def backend() -> str:
    """The active override: "auto" (by device), "torch" or "triton"."""
    return _backend


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run the enclosed ops on ``name`` ("auto", "torch" or "triton"); restores the previous one."""
    global _backend
    if name not in BACKENDS:
        raise ValueError(f"ops backend {name!r}: expected one of {', '.join(BACKENDS)}")
    previous, _backend = _backend, name
    try:
        yield
    finally:
        _backend = previous


def interpreting() -> bool:
    """True when Triton kernels run in the CPU interpreter (read by triton at kernel definition)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


@functools.cache
def _kernels() -> tuple[ModuleType, ModuleType, ModuleType]:
    from updraft.ops import activation, norm, rotary

    return norm, rotary, activation


def _kernel_module(x: torch.Tensor, index: int) -> ModuleType | None:
    """The kernel module (0 norm, 1 rotary, 2 activation) this call should use, or None for the
    torch path. Decided before importing anything, so the CPU path never imports triton."""
    if _backend == "torch" or (_backend == "auto" and not (x.is_cuda and triton_available())):
        return None
    if _backend == "triton":
        if not triton_available():
            raise RuntimeError("ops backend is 'triton' but triton is not installed")
        if not x.is_cuda and not interpreting():
            raise RuntimeError("Triton kernels on CPU tensors need TRITON_INTERPRET=1 set before triton is imported")
    return _kernels()[index]


def _covered(supported: bool) -> bool:
    """A kernel's support check; under the "triton" override an uncovered input is an error."""
    if not supported and _backend == "triton":
        raise ValueError("ops backend is 'triton' but no kernel covers these inputs")
    return supported


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim of ``x`` (any leading dims, e.g. per-head ``[T, H, D]``)."""
    norm = _kernel_module(x, 0)
    if norm is not None and _covered(norm.supported(x, weight)):
        return norm.rmsnorm(x, weight, eps)[0]
    return reference.rmsnorm(x, weight, eps)


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rmsnorm(x + residual), x + residual)`` in one pass; the inputs are not modified."""
    norm = _kernel_module(x, 0)
    if norm is not None and _covered(norm.supported(x, weight, residual)):
        out, new_residual = norm.rmsnorm(x, weight, eps, residual)
        assert new_residual is not None
        return out, new_residual
    return reference.fused_add_rmsnorm(x, residual, weight, eps)


def rotary_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> None:
    """Neox (rotate-half) RoPE of ``q`` [T, Hq, D] and ``k`` [T, Hkv, D] in place, at
    ``positions`` [T], from ``cos_sin`` [max_pos, D] (rows ``cat(cos, sin)``)."""
    rotary = _kernel_module(q, 1)
    if rotary is not None and _covered(rotary.supported(q, k, positions, cos_sin)):
        rotary.rotary_(q, k, positions, cos_sin)
    else:
        reference.rotary_(q, k, positions, cos_sin)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up = cat(gate, up)`` [..., 2I] -> [..., I]."""
    activation = _kernel_module(gate_up, 2)
    if activation is not None and _covered(activation.supported(gate_up)):
        return activation.silu_and_mul(gate_up)
    return reference.silu_and_mul(gate_up)


__all__ = [
    "BACKENDS",
    "backend",
    "dense",
    "fused_add_rmsnorm",
    "fused_layers",
    "interpreting",
    "reference",
    "rmsnorm",
    "rotary_",
    "silu_and_mul",
    "small_m",
    "small_m_rows",
    "triton_available",
    "use_backend",
    "use_fused_layers",
]

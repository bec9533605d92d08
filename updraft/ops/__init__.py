"""Fused element-wise ops of the decoder layer: RMSNorm (plain and fused with the residual add),
in-place rotary embedding of q and k, and SiLU-and-mul; and ``dense``, the product of every
linear layer (``F.linear``, or on CPU in float32 the faster of two calls on this machine: see ``dense.py``).

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

Small-M GEMMs (``gemv``): at M <= 64 token rows (decode, verify, draft steps) the decoder
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
Every Triton kernel here starts with ``triton_utils.pdl_enter`` (the PDL contract: nothing read
or written before the wait on the previous kernel); the element-wise ones launch without PDL by
default (``triton_utils.DEFAULT_FAMILIES``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
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
SMALL_M = 64
_SMALL_M_DTYPES = (torch.bfloat16, torch.float16)
#: A GEMM the fused layer would launch, keyed as ``gemv_config.lookup`` keys its config:
#: (kind, N, K, head dim), N in the kind's units (gate_up: the intermediate size).
Gemm = tuple[str, int, int, int]


@dataclass(frozen=True)
class FusedPolicy:
    """Where "auto" takes the fused layers: CUDA bf16/fp16 rows, at most ``max_rows`` of them over
    activations at most ``narrow_width`` wide; wider ones (up to ``max_width``) at most
    ``wide_max_rows``, and (``wide_needs_tuned``) only where every GEMM the caller is about to run
    (``gemms``) has a launch config tuned for this GPU, dtype and M bucket (``ops/gemv_tuned.json``
    or the user's ``--tune`` cache): another 4096-wide model (Qwen3-8B's 12288-wide MLP) does not
    inherit the 8B shape's configs.

    H100 runs of ``benchmarks/decode_kernels.py`` (random weights, 1k context, CUDA graphs):

    * SmolLM2 (576 wide): decode fused at bs 1 / 2 / 4 / 8 / 16 in 0.689 / 0.745 / 0.872 / 0.911 /
      1.015 ms against 0.836 / 0.851 / 0.972 / 1.032 / 1.142 unfused; a 6-token verify at bs 1 /
      2 (6 / 12 rows) 0.856 / 0.870 against 0.982 / 0.889 (2026-11-26). Then every program
      normalised every token row in its prologue and past 16 rows the fused layers lost (bs 8
      verify, 48 rows: 1.286 against 1.143; bs 32 decode: 1.271 against 1.149). Since the
      producer GEMM leaves the rows ready for the norm (``gemv.NormedRows``, 2026-11-27) they win
      to 64 rows: decode at bs 32 / 48 / 64 0.994 / 1.218 / 1.366 against 1.244 / 1.453 / 1.591,
      verify at bs 4 / 5 / 6 (24-36 rows) 0.777 / 0.873 / 0.884 against 1.00 / 0.936 / 1.061;
      at bs 8 / 10 (48 / 60 rows) the verify did not gain (1.122-1.156 against 1.023-1.126;
      1.155 against 1.147), so a TARGET_VERIFY forward took at most 40 rows (``for_verify``).
      The cause was PDL on both the fused GEMMs and the verify block's attention: with the
      attention of a 41-64-row block launched without it (``TritonBackend.verify_no_pdl_rows``,
      2026-11-27) the 48-row verify takes 0.984 ms on the fused layers against 1.132 unfused, and
      ``verify_max_rows`` is 64 (``UPDRAFT_FUSED_MAX_ROWS`` still sets both limits).
    * 8B shape (4096 wide): with the tuned 1- and 8-row configs, decode 5.85 ms against
      6.16-6.21 and a 6-token verify 6.10-6.22 against 6.32-6.40; at buckets with no tuned config
      the heuristic's launches lost badly (bs 2 decode 16.4 ms against 6.19; bs 3 8.16 against
      6.27; bs 16 8.79 against 6.97), so a wide shape needs its bucket tuned. Tuned (shipped), bs
      2 / 3 / 4 decode 5.94 / 6.10 / 6.16 against 6.17 / 6.26 / 6.34 unfused.
    * 8B shape on the H200 with its own 16- and 32-row configs (2026-12-02,
      ``benchmarks/results/2026-12-02-h200-wide-rows``): a 6-token verify at bs 2 / 4 (12 / 24
      rows) 4.45 / 4.58 ms against 4.89 / 4.93 on cuBLAS, decode at bs 16 / 32 4.82 / 5.63 against
      5.24 / 6.11; at 48 rows the sweep's best tiles lost (bs 8 verify 5.99 against 5.24: down
      46 us against cuBLAS's 34; 64-column tiles tied, 5.24), so ``wide_max_rows`` is 32 and the
      64-row bucket ships no wide entry.
    """

    max_rows: int = 64
    narrow_width: int = 1024
    wide_max_rows: int = 32
    max_width: int = 4096
    wide_needs_tuned: bool = True
    verify_max_rows: int = 64

    def for_verify(self) -> FusedPolicy:
        """The policy of a TARGET_VERIFY forward (``DecoderLM.forward`` scopes it)."""
        return dataclasses.replace(self, max_rows=min(self.max_rows, self.verify_max_rows))

    def takes(self, rows: int, width: int, device: torch.device, dtype: torch.dtype = torch.bfloat16,
              gemms: tuple[Gemm, ...] = ()) -> bool:
        if rows > self.max_rows or width > self.max_width:
            return False
        if width <= self.narrow_width:
            return True
        if rows > self.wide_max_rows:
            return False
        if not self.wide_needs_tuned:
            return True
        from updraft.ops import gemv_config

        bucket = gemv_config.m_bucket(rows)
        return bool(gemms) and all(gemv_config.is_tuned(kind, n, k, bucket, dtype, device, d) for kind, n, k, d in gemms)


def _policy_from_env() -> FusedPolicy:
    """The default policy; ``UPDRAFT_FUSED_MAX_ROWS`` (1..64) moves its row limit (a verify block's too)."""
    raw = os.environ.get("UPDRAFT_FUSED_MAX_ROWS", "")
    if raw == "":
        return FusedPolicy()
    try:
        rows = int(raw)
    except ValueError:
        rows = 0
    if not 1 <= rows <= SMALL_M:
        raise ValueError(f"UPDRAFT_FUSED_MAX_ROWS={raw!r}: expected an integer from 1 to {SMALL_M}")
    return FusedPolicy(max_rows=rows, verify_max_rows=rows)


_policy = _policy_from_env()
#: Every shape the kernels take: the "fused_rows64" side of benchmarks/decode_kernels.py.
EVERYWHERE = FusedPolicy(max_rows=SMALL_M, narrow_width=1 << 30, wide_max_rows=SMALL_M, max_width=1 << 30,
                         wide_needs_tuned=False)


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


def small_m(x: torch.Tensor, gemms: tuple[Gemm, ...] = ()) -> bool:
    """Whether rows ``x`` [M, K] take the small-M kernels for ``gemms`` (see the module
    docstring and ``FusedPolicy``)."""
    return x.dim() == 2 and small_m_rows(x.shape[0], x.dtype, x.device, x.shape[1], gemms)


def small_m_rows(rows: int, dtype: torch.dtype, device: torch.device, width: int = 0,
                 gemms: tuple[Gemm, ...] = ()) -> bool:
    """``small_m`` for ``rows`` token rows ``width`` wide of ``dtype`` on ``device``."""
    if not _fused_layers or _backend == "torch" or not 1 <= rows <= SMALL_M:
        return False
    cuda = device.type == "cuda"
    if _backend == "auto":
        return (cuda and dtype in _SMALL_M_DTYPES and triton_available()
                and _policy.takes(rows, width, device, dtype, gemms))
    return triton_available() and (cuda or interpreting()) and dtype in (torch.float32, *_SMALL_M_DTYPES)


def fused_policy() -> FusedPolicy:
    return _policy


@contextlib.contextmanager
def use_fused_policy(policy: FusedPolicy) -> Iterator[None]:
    """Decide "auto"'s fused layers by ``policy`` inside the block (side-by-side timing)."""
    global _policy
    previous, _policy = _policy, policy
    try:
        yield
    finally:
        _policy = previous


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


def _kernel_path(x: torch.Tensor) -> bool:
    """Whether this call on ``x`` takes a Triton kernel (False: the torch path). Decided before
    importing anything, so the CPU path never imports triton."""
    if _backend == "torch" or (_backend == "auto" and not (x.is_cuda and triton_available())):
        return False
    if _backend == "triton":
        if not triton_available():
            raise RuntimeError("ops backend is 'triton' but triton is not installed")
        if not x.is_cuda and not interpreting():
            raise RuntimeError("Triton kernels on CPU tensors need TRITON_INTERPRET=1 set before triton is imported")
    return True


def _kernel_module(x: torch.Tensor, index: int) -> ModuleType | None:
    """The kernel module (0 norm, 1 rotary, 2 activation) this call should use, or None for the
    torch path (``_kernel_path``)."""
    return _kernels()[index] if _kernel_path(x) else None


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


def latent_rows_(kv: torch.Tensor, q_pe: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
                 weight: torch.Tensor, eps: float, rank: int, pool: torch.Tensor | None = None,
                 loc: torch.Tensor | None = None) -> bool:
    """MLA's new latent rows in one kernel (``latent.py``), in place: ``kv[:, :rank]`` normalised
    by ``weight``, ``kv[:, rank:]`` and ``q_pe`` [T, H, rope] rotated at ``positions``, and with
    ``pool`` [slots, 1, rank + rope] each finished row stored at ``loc``. True when it ran; False
    (nothing done) where no kernel covers the inputs: the caller runs its unfused norm, rotary and
    store (``rmsnorm`` / ``rotary_`` and the backend's ``forward``)."""
    if not _kernel_path(kv):
        return False
    from updraft.ops import latent

    if not _covered(latent.supported(kv, q_pe, positions, cos_sin, weight, rank, pool, loc)):
        return False
    latent.latent_rows_(kv, q_pe, positions, cos_sin, weight, eps, rank, pool, loc)
    return True


#: Most token rows ``float_linear`` takes the small-M kernel for (``gemv.MAX_M``; cuBLAS above).
#: H100, DeepSeek-V2-Lite's MTP cycle at bs 8 (2026-11-26): S = 3 (32 rows a verify) took 10.87 ms
#: with the router on cuBLAS past 16 rows, 10.67 with the kernel up to 64.
FLOAT_LINEAR_MAX_ROWS = 64


def float_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x.float() @ weight.float().T`` -> [M, N] float32 for ``x`` [M, K] and ``weight`` [N, K] of
    one dtype (a MoE router's logits). At most ``FLOAT_LINEAR_MAX_ROWS`` rows of a kernel dtype
    take one small-M kernel launch (``gemv.linear(exact_f32=True)``: the products of the dtype's
    values, exact in float32, summed in float32 in the kernel's order), where the torch path casts
    x and the whole weight, then runs an fp32 GEMM that cuBLAS splits over K at two rows (a SIMT
    SGEMM and a reduce: ~4 us a layer more than at one row on the H100, 2026-11-26). Elsewhere,
    and under ``use_fused_layers(False)``, ``dense`` of the cast inputs."""
    if _float_linear_fused(x, weight):
        from updraft.ops import gemv

        return gemv.linear(x, weight, exact_f32=True)[0]
    return dense(x.float(), weight.float())


def _float_linear_fused(x: torch.Tensor, weight: torch.Tensor) -> bool:
    if (not _fused_layers or _backend == "torch" or x.dim() != 2 or not 1 <= x.shape[0] <= FLOAT_LINEAR_MAX_ROWS
            or not triton_available()):
        return False
    if _backend == "auto":
        ok = x.is_cuda and x.dtype in _SMALL_M_DTYPES
    else:
        ok = (x.is_cuda or interpreting()) and x.dtype in (torch.float32, *_SMALL_M_DTYPES)
    if not ok:
        return False
    from updraft.ops import gemv

    return gemv.supported(x, weight)


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
    "float_linear",
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

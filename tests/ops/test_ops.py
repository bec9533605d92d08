"""``updraft.ops`` on CPU: each Triton kernel under the interpreter against the torch path and an
independent float64 computation (fp32 <= 1e-5, bf16 <= 1e-2 relative to the output's scale),
MLA's latent-row kernel against the unfused ops it replaces;
the whole model with ops forced to Triton against the torch path; the CPU model path bitwise
equal to the unfused pre-fusion code (incl. EAGLE-3 aux hidden states); an sm_90 compile check.

The kernels round bf16 intermediates exactly where torch rounds (the interpreter's own bf16
rounding truncates; ``updraft.ops.triton_utils`` corrects it there), so bf16 results are also
compared bit for bit where no reduction or transcendental is involved (rotary, residual add).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from updraft import ops
from updraft.batch import CaptureHidden, ForwardBatch, ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.llama import LlamaForCausalLM, ModelOutput
from updraft.models.loader import load_checkpoint
from updraft.ops import reference
from updraft.runtime.model_runner import ModelRunner

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
needs_interpreter = pytest.mark.skipif(
    not INTERPRET or importlib.util.find_spec("triton") is None,
    reason="needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)",
)
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.bfloat16]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref|: relative to the output's scale (no blow-up near zeros)."""
    ref = ref.double()
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


def randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def assert_same_roundings(out: torch.Tensor, ref: torch.Tensor) -> None:
    """bf16: the kernel rounds where torch rounds, so results agree bit for bit except for rare
    flips from an fp32 intermediate that differs by an ulp (reduction order, exp); a missing or
    extra rounding step shows up as tens of percent of the elements."""
    if ref.dtype == torch.bfloat16:
        assert (out != ref).float().mean().item() <= 1e-2


def on_triton(fn: Callable[..., Any], *args: Any) -> Any:
    with ops.use_backend("triton"):
        return fn(*args)


# ---- float64 ground truth, written independently of updraft.ops.reference ----------------------
def rmsnorm64(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def rotary64(x: torch.Tensor, pos: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    row = table.double()[pos][:, None, :]
    cos, sin = row[..., :half], row[..., half:]
    x1, x2 = x.double()[..., :half], x.double()[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rope_table(max_pos: int, dim: int, dtype: torch.dtype) -> torch.Tensor:
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    f = torch.arange(max_pos, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], dim=-1).to(dtype)


# ---- RMSNorm ----------------------------------------------------------------------------------
@needs_interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows,dim", [(1, 64), (37, 96), (5, 4096), (3, 576)])
def test_rmsnorm(dtype: torch.dtype, rows: int, dim: int) -> None:
    x = randn(rows, dim, dtype=dtype, seed=1, scale=3.0)
    w = (1 + randn(dim, dtype=torch.float32, seed=2, scale=0.2)).to(dtype)
    out = on_triton(ops.rmsnorm, x, w, 1e-6)
    ref = reference.rmsnorm(x, w, 1e-6)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert rel_err(out, rmsnorm64(x, w, 1e-6)) <= TOL[dtype]
    assert rel_err(out, ref) <= TOL[dtype]
    assert_same_roundings(out, ref)


@needs_interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows,dim", [(1, 64), (37, 96), (6, 2048)])
def test_fused_add_rmsnorm(dtype: torch.dtype, rows: int, dim: int) -> None:
    x = randn(rows, dim, dtype=dtype, seed=3)
    res = randn(rows, dim, dtype=dtype, seed=4, scale=4.0)
    w = (1 + randn(dim, dtype=torch.float32, seed=5, scale=0.2)).to(dtype)
    x0, res0 = x.clone(), res.clone()
    out, new_res = on_triton(ops.fused_add_rmsnorm, x, res, w, 1e-5)
    ref_out, ref_res = reference.fused_add_rmsnorm(x, res, w, 1e-5)
    assert torch.equal(x, x0) and torch.equal(res, res0), "inputs must not be modified"
    assert torch.equal(new_res, ref_res), "the residual sum must round exactly as x + residual"
    assert rel_err(out, rmsnorm64(x.double() + res.double(), w, 1e-5)) <= TOL[dtype]
    assert rel_err(out, ref_out) <= TOL[dtype]
    assert_same_roundings(out, ref_out)


@needs_interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm_per_head_on_strided_view(dtype: torch.dtype) -> None:
    """Qwen3's q/k norm: [T, H, D] heads sliced out of a wider QKV row (not flattenable)."""
    t, h, d = 7, 6, 64
    qkv = randn(t, h * d + 2 * 2 * d, dtype=dtype, seed=6)
    q = qkv[:, : h * d].reshape(t, h, d)
    assert not q.is_contiguous()
    w = (1 + randn(d, dtype=torch.float32, seed=7, scale=0.2)).to(dtype)
    out = on_triton(ops.rmsnorm, q, w, 1e-6)
    assert out.shape == (t, h, d)
    assert rel_err(out, rmsnorm64(q, w, 1e-6)) <= TOL[dtype]
    assert rel_err(out, reference.rmsnorm(q, w, 1e-6)) <= TOL[dtype]
    assert_same_roundings(out, reference.rmsnorm(q, w, 1e-6))


@needs_interpreter
def test_rmsnorm_mixed_dtypes_promote_like_torch() -> None:
    """A bf16 input with an fp32 weight gives fp32 (torch promotion), rounding h to bf16 first."""
    x = randn(5, 128, dtype=torch.bfloat16, seed=8)
    w = 1 + randn(128, dtype=torch.float32, seed=9, scale=0.2)
    out = on_triton(ops.rmsnorm, x, w, 1e-6)
    ref = reference.rmsnorm(x, w, 1e-6)
    assert out.dtype == ref.dtype == torch.float32
    assert rel_err(out, ref) <= 1e-5


# ---- rotary ----------------------------------------------------------------------------------
@needs_interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "tokens,hq,hkv,dim",
    [(1, 4, 1, 64), (5, 6, 2, 128), (37, 32, 8, 128), (3, 8, 8, 32), (9, 3, 1, 256), (4, 4, 2, 96)],
)
def test_rotary(dtype: torch.dtype, tokens: int, hq: int, hkv: int, dim: int) -> None:
    """q/k as strided views of one QKV row (as the model passes them), unsorted positions, GQA/MQA;
    v (the rest of the row) must stay untouched."""
    qkv = randn(tokens, (hq + 2 * hkv) * dim, dtype=dtype, seed=10)
    q = qkv[:, : hq * dim].reshape(tokens, hq, dim)
    k = qkv[:, hq * dim : (hq + hkv) * dim].reshape(tokens, hkv, dim)
    v_before = qkv[:, (hq + hkv) * dim :].clone()
    table = rope_table(300, dim, dtype)
    pos = torch.randperm(300, generator=torch.Generator().manual_seed(11))[:tokens]
    q_ref, k_ref = q.clone(), k.clone()
    reference.rotary_(q_ref, k_ref, pos, table)
    q64, k64 = rotary64(q, pos, table), rotary64(k, pos, table)
    on_triton(ops.rotary_, q, k, pos.to(torch.int32 if tokens % 2 else torch.int64), table)
    assert torch.equal(qkv[:, (hq + hkv) * dim :], v_before)
    assert rel_err(q, q64) <= TOL[dtype] and rel_err(k, k64) <= TOL[dtype]
    if dtype == torch.float32:
        assert rel_err(q, q_ref) <= 1e-6 and rel_err(k, k_ref) <= 1e-6
    else:  # products of two bf16 are exact in fp32: the same roundings as torch, bit for bit
        assert torch.equal(q, q_ref) and torch.equal(k, k_ref)


def test_rotary_embedding_forward_returns_copies() -> None:
    """``RotaryEmbedding.forward`` keeps its old contract (rotated copies, inputs untouched)."""
    from updraft.models.config import RopeScaling
    from updraft.models.layers import RotaryEmbedding

    rope = RotaryEmbedding(64, 128, 10000.0, RopeScaling())
    rope.build(torch.device("cpu"), torch.float32)
    q, k = randn(3, 4, 64, dtype=torch.float32, seed=12), randn(3, 2, 64, dtype=torch.float32, seed=13)
    q0, k0 = q.clone(), k.clone()
    pos = torch.tensor([7, 0, 100])
    q2, k2 = rope(pos, q, k)
    assert torch.equal(q, q0) and torch.equal(k, k0)
    assert rel_err(q2, rotary64(q, pos, rope.cos_sin)) <= 1e-6
    assert rel_err(k2, rotary64(k, pos, rope.cos_sin)) <= 1e-6


# ---- SiLU and mul ------------------------------------------------------------------------------
@needs_interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 96), (7, 1500), (33, 64), (2, 3, 100)])
def test_silu_and_mul(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    gate_up = randn(*shape[:-1], 2 * shape[-1], dtype=dtype, seed=14, scale=4.0)
    out = on_triton(ops.silu_and_mul, gate_up)
    g, u = gate_up.double().chunk(2, dim=-1)
    assert out.shape == (*shape[:-1], shape[-1])
    assert rel_err(out, g / (1 + torch.exp(-g)) * u) <= TOL[dtype]
    assert rel_err(out, reference.silu_and_mul(gate_up)) <= TOL[dtype]
    assert_same_roundings(out, reference.silu_and_mul(gate_up))


# ---- dispatch ----------------------------------------------------------------------------------
def test_cpu_auto_dispatch_is_the_torch_path() -> None:
    x, w = randn(4, 64, dtype=torch.float32, seed=15), randn(64, dtype=torch.float32, seed=16)
    with ops.use_backend("auto"):
        assert torch.equal(ops.rmsnorm(x, w, 1e-6), reference.rmsnorm(x, w, 1e-6))
        assert torch.equal(ops.silu_and_mul(x), reference.silu_and_mul(x))
    with pytest.raises(ValueError, match="ops backend"):
        with ops.use_backend("cuda"):
            pass
    assert ops.backend() == "auto"


@needs_interpreter
def test_forced_triton_refuses_uncovered_inputs_and_handles_empty() -> None:
    x64 = torch.randn(3, 8, dtype=torch.float64)
    with ops.use_backend("triton"), pytest.raises(ValueError, match="no kernel covers"):
        ops.rmsnorm(x64, torch.ones(8, dtype=torch.float64), 1e-6)
    empty = torch.empty(0, 64)
    out, res = on_triton(ops.fused_add_rmsnorm, empty, empty, torch.ones(64), 1e-6)
    assert out.shape == res.shape == (0, 64)
    assert on_triton(ops.silu_and_mul, empty).shape == (0, 32)
    q, k = torch.empty(0, 4, 64), torch.empty(0, 2, 64)
    on_triton(ops.rotary_, q, k, torch.empty(0, dtype=torch.long), rope_table(8, 64, torch.float32))


def test_launch_warps_are_powers_of_two() -> None:
    """triton rejects other warp counts when compiling, and the interpreter ignores them."""
    from updraft.ops.triton_utils import num_warps

    for n in [1, 255, 256, 2560, 5120, 4096, 65536, *range(3, 70000, 997)]:
        for cap in (8, 16):
            w = num_warps(n, max_warps=cap)
            assert 1 <= w <= cap and w & (w - 1) == 0, (n, w)


# ---- whole model -------------------------------------------------------------------------------
def run_model(model: LlamaForCausalLM, backend: str = "torch_native") -> list[ModelOutput]:
    """Prefill two requests (12 and 9 tokens, all logits, FULL hidden) then one decode step."""
    pool = ReqToTokenPool(4, 32, "cpu")
    alloc = PagedAllocator(pool, 34, 1)
    runner = ModelRunner(model, pool, 34, 1, backend)
    rows = [pool.alloc(), pool.alloc()]
    for r in rows:
        assert r is not None and alloc.ensure(r, 16)
    toks = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(17)).tolist()
    prefill = runner.make_batch(ForwardMode.EXTEND, toks[0][:12] + toks[1][:9], rows, [12, 9], [12, 9],
                                logits="all", capture_hidden=CaptureHidden.FULL)
    decode = runner.make_batch(ForwardMode.DECODE, [toks[0][12], toks[1][9]], rows, [13, 10], [1, 1],
                               stride=1, capture_hidden=CaptureHidden.LAST)
    return [runner.forward(prefill), runner.forward(decode)]


def outputs(outs: list[ModelOutput]) -> list[torch.Tensor]:
    return [t for o in outs for t in (o.logits, o.hidden, o.aux_hidden) if t is not None]


MODELS = [("llama", {"num_hidden_layers": 5}), ("qwen3", {})]


@needs_interpreter
@pytest.mark.parametrize("arch,overrides", MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_model_on_triton_ops_matches_torch_ops(tiny_checkpoint, arch: str, overrides: dict, dtype: torch.dtype) -> None:
    folder = tiny_checkpoint(arch, **overrides)
    model = load_checkpoint(folder, dtype=dtype, device="cpu", progress=False).model
    model.aux_layers = (0, 2, 4) if arch == "llama" else (1,)
    with ops.use_backend("torch"):
        ref = outputs(run_model(model))
    with ops.use_backend("triton"):
        got = outputs(run_model(model))
    assert len(got) == len(ref) == 6
    for a, b in zip(got, ref):
        assert a.shape == b.shape
        assert rel_err(a, b) <= (1e-5 if dtype == torch.float32 else 2e-2)


def unfused_forward(model: LlamaForCausalLM, batch: ForwardBatch) -> ModelOutput:
    """The pre-fusion model forward, op for op (``x = x + attn(norm(x)); x = x + mlp(norm(x))``,
    RoPE out of place, separate final norm), from the model's own parameters."""
    r = reference
    h = model.embed(batch.input_ids)
    captured = {}
    for i, layer in enumerate(model.model.layers):
        a, eps = layer.self_attn, layer.post_attention_layernorm.eps
        t = h.shape[0]
        q, k, v = a.qkv_proj(r.rmsnorm(h, layer.input_layernorm.weight, eps)).split([a.q_size, a.kv_size, a.kv_size], dim=-1)
        q, k, v = q.reshape(t, a.num_heads, -1), k.reshape(t, a.num_kv_heads, -1), v.reshape(t, a.num_kv_heads, -1)
        if a.q_norm is not None and a.k_norm is not None:
            q, k = r.rmsnorm(q, a.q_norm.weight, eps), r.rmsnorm(k, a.k_norm.weight, eps)
        cos, sin = r.cos_sin_at(batch.positions, model.rotary.cos_sin)
        q, k = r.rotate_half(q, cos, sin), r.rotate_half(k, cos, sin)
        h = h + a.o_proj(batch.attn_backend.forward(q, k, v, a.layer_id, batch).reshape(t, a.q_size))
        gate, up = layer.mlp.gate_up_proj(r.rmsnorm(h, layer.post_attention_layernorm.weight, eps)).chunk(2, dim=-1)
        h = h + layer.mlp.down_proj(F.silu(gate) * up)
        captured[i] = h
    h = r.rmsnorm(h, model.model.norm.weight, model.model.norm.eps)
    aux = torch.cat([captured[i] for i in model.aux_layers], dim=-1)
    idx = batch.logits_indices
    rows = h[idx] if batch.capture_hidden == CaptureHidden.LAST else h
    logits = model.compute_logits(h[idx])
    return ModelOutput(logits=logits, hidden=rows, aux_hidden=aux[idx] if batch.capture_hidden == CaptureHidden.LAST else aux)


@pytest.mark.parametrize("arch,overrides", MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_model_is_bitwise_the_unfused_code(tiny_checkpoint, arch: str, overrides: dict, dtype: torch.dtype) -> None:
    """On CPU the restructured model (residual stream, fused-op dispatch, in-place RoPE on views)
    reproduces the unfused code bit for bit: logits, final hidden and EAGLE-3 aux hidden states
    (the residual stream after each captured layer)."""
    folder = tiny_checkpoint(arch, **overrides)
    model = load_checkpoint(folder, dtype=dtype, device="cpu", progress=False).model
    model.aux_layers = (0, 2, 4) if arch == "llama" else (1, 0)
    new = outputs(run_model(model))
    real_forward = model.forward
    model.forward = lambda batch: unfused_forward(model, batch)  # type: ignore[method-assign]
    try:
        old = outputs(run_model(model))
    finally:
        model.forward = real_forward  # type: ignore[method-assign]
    assert len(new) == len(old) == 6
    for a, b in zip(new, old):
        assert torch.equal(a, b)


# ---- MLA's latent rows (ops.latent_rows_) ------------------------------------------------------
def _latent_case(tokens: int, heads: int, rank: int, rope: int, dtype: torch.dtype, seed: int = 0):
    kv = randn(tokens, rank + rope, dtype=dtype, seed=seed, scale=3.0)
    q = randn(tokens, heads, 24 + rope, dtype=dtype, seed=seed + 1)  # nope columns first, as DeepSeek's q
    w = (1 + randn(rank, dtype=torch.float32, seed=seed + 2, scale=0.2)).to(dtype)
    table = rope_table(300, rope, dtype)
    pos = torch.randperm(300, generator=torch.Generator().manual_seed(seed + 3))[:tokens]
    return kv, q, w, table, pos


def _latent_unfused(kv: torch.Tensor, q: torch.Tensor, w: torch.Tensor, table: torch.Tensor, pos: torch.Tensor,
                    rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What the DeepSeek layer computed before: rotary in place, the norm, ``cat``."""
    kv, q = kv.clone(), q.clone()
    q_pe = q[..., -(kv.shape[1] - rank):]
    reference.rotary_(q_pe, kv[:, None, rank:], pos, table)
    row = torch.cat([reference.rmsnorm(kv[:, :rank], w, 1e-6), kv[:, rank:]], dim=-1)
    return row, q


@needs_interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tokens,heads,rank,rope", [(1, 16, 512, 64), (5, 3, 32, 16), (9, 8, 96, 32)])
@pytest.mark.parametrize("store", [True, False])
def test_latent_rows_match_the_unfused_ops(dtype: torch.dtype, tokens: int, heads: int, rank: int, rope: int,
                                           store: bool) -> None:
    kv, q, w, table, pos = _latent_case(tokens, heads, rank, rope, dtype)
    row_ref, q_ref = _latent_unfused(kv, q, w, table, pos, rank)
    kv64 = torch.cat([rmsnorm64(kv[:, :rank], w, 1e-6), rotary64(kv[:, None, rank:], pos, table)[:, 0]], dim=-1)
    q_pe64 = rotary64(q[..., -rope:], pos, table)
    nope = q[..., :-rope].clone()
    pool = randn(40, 1, rank + rope, dtype=dtype, seed=9) if store else None
    pool_before = pool.clone() if store else None
    loc = torch.randperm(40, generator=torch.Generator().manual_seed(10))[:tokens] if store else None
    with ops.use_backend("triton"):
        ran = ops.latent_rows_(kv, q[..., -rope:], pos.to(torch.int32 if tokens % 2 else torch.int64), table, w, 1e-6,
                               rank, pool, loc)
    assert ran
    assert torch.equal(q[..., :-rope], nope), "the query's nope columns are not the kernel's"
    assert rel_err(kv, kv64) <= TOL[dtype] and rel_err(q[..., -rope:], q_pe64) <= TOL[dtype]
    if dtype == torch.float32:
        assert rel_err(kv, row_ref) <= 1e-6 and torch.allclose(q, q_ref, rtol=0, atol=1e-6)
    else:  # the rotations are bitwise torch's; the norm rounds where torch rounds
        assert torch.equal(kv[:, rank:], row_ref[:, rank:]) and torch.equal(q, q_ref)
        assert_same_roundings(kv[:, :rank], row_ref[:, :rank])
    if store:
        assert pool is not None and pool_before is not None and loc is not None
        assert torch.equal(pool[loc, 0], kv), "each finished row at its slot"
        others = torch.ones(40, dtype=torch.bool)
        others[loc] = False
        assert torch.equal(pool[others], pool_before[others]), "no other slot written"


@needs_interpreter
def test_latent_rows_refusals() -> None:
    """CPU "auto" does nothing (the caller's unfused ops run); the forced kernel refuses inputs it
    does not cover (a weight of another dtype: the unfused norm would promote) instead of running."""
    kv, q, w, table, pos = _latent_case(3, 4, 32, 16, torch.bfloat16)
    kv0, q0 = kv.clone(), q.clone()
    assert not ops.latent_rows_(kv, q[..., -16:], pos, table, w, 1e-6, 32)
    assert torch.equal(kv, kv0) and torch.equal(q, q0)
    with ops.use_backend("triton"), pytest.raises(ValueError, match="no kernel covers"):
        ops.latent_rows_(kv, q[..., -16:], pos, table, w.float(), 1e-6, 32)
    with ops.use_backend("triton"), pytest.raises(ValueError, match="no kernel covers"):
        ops.latent_rows_(kv, q[..., -16:], pos, table, w, 1e-6, 32, torch.zeros(8, 1, 40, dtype=torch.bfloat16),
                         torch.arange(3))  # a pool row narrower than the latent row


def test_kernels_compile_for_h100() -> None:
    """The interpreter accepts code the compiler rejects: compile every kernel for sm_90 in a
    subprocess without TRITON_INTERPRET (no GPU needed; triton ships ptxas)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "updraft.ops.compile_check"],
        env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300,
    )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 and not any(line.startswith("ok ") for line in proc.stdout.splitlines()):
        pytest.skip(f"no CUDA compile toolchain in this triton install: {log[-400:]}")
    assert proc.returncode == 0, log[-3000:]

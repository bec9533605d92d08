"""``updraft.ops`` on CUDA: the compiled kernels against the torch path and float64 (fp32 <= 1e-5,
bf16 <= 1e-2, bf16 rotary bit for bit), capture and replay in a CUDA graph, the whole model
(Triton ops vs torch ops), and a timing printout of one decoder layer's element-wise work,
fused vs unfused, for the Llama-3.1-8B shape at T = 1 and T = 512:

    pytest -m gpu tests/ops/test_ops_gpu.py -s
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from updraft import ops
from updraft.batch import CaptureHidden, ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.loader import load_checkpoint
from updraft.ops import gemv_config, reference
from updraft.runtime.model_runner import ModelRunner

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.usefixtures("compiled_triton")]
DEV = "cuda"
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.bfloat16]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


def randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(*shape, generator=gen, device=DEV) * scale).to(dtype)


def rope_table(max_pos: int, dim: int, dtype: torch.dtype) -> torch.Tensor:
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32, device=DEV) / dim))
    f = torch.arange(max_pos, dtype=torch.float32, device=DEV)[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], dim=-1).to(dtype)


def rotary64(x: torch.Tensor, pos: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Neox rotation of ``x`` [T, H, D] at ``pos`` in float64 (``table`` rows ``cat(cos, sin)``)."""
    half = x.shape[-1] // 2
    row = table.double()[pos][:, None, :]
    x1, x2 = x.double()[..., :half], x.double()[..., half:]
    return torch.cat([x1 * row[..., :half] - x2 * row[..., half:], x2 * row[..., :half] + x1 * row[..., half:]], -1)


def rmsnorm64(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def check(out: torch.Tensor, ref: torch.Tensor, ref64: torch.Tensor, rounding_may_differ: bool = False) -> None:
    dtype = ref.dtype
    assert out.dtype == dtype and out.shape == ref.shape
    assert rel_err(out, ref64) <= TOL[dtype], f"vs float64: {rel_err(out, ref64):.2e}"
    assert rel_err(out, ref) <= TOL[dtype], f"vs torch: {rel_err(out, ref):.2e}"
    if dtype == torch.bfloat16 and rounding_may_differ:
        # The fused kernel may round once where torch rounds every intermediate (the compiler
        # contracts x*cos + r*sin into an FMA). Then each value lies within two bf16 ulps of its
        # products' scale (the head's largest value) from torch's, and on average at least as
        # close to float64. (Comparing the two largest errors instead failed at random on the
        # H200: over one token's few hundred values the single-rounded maximum can land above
        # the triple-rounded one by chance.)
        ulps = 2 * torch.finfo(torch.bfloat16).eps * ref.double().abs().amax(dim=-1, keepdim=True)
        assert ((out.double() - ref.double()).abs() <= ulps).all(), "more than two bf16 ulps from torch"
        fused, unfused = ((out.double() - ref64).abs().mean().item(), (ref.double() - ref64).abs().mean().item())
        assert fused <= 1.05 * unfused + 1e-9, f"mean error against float64: fused {fused:.2e}, torch {unfused:.2e}"
    elif dtype == torch.bfloat16:
        mismatch = (out != ref).float().mean().item()
        assert mismatch <= 1e-2, f"bf16 mismatch fraction {mismatch:.2e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows,dim", [(1, 4096), (37, 96), (513, 4096), (7, 576), (3, 8192)])
def test_norms(dtype: torch.dtype, rows: int, dim: int) -> None:
    x = randn(rows, dim, dtype=dtype, seed=1, scale=3.0)
    res = randn(rows, dim, dtype=dtype, seed=2)
    w = (1 + randn(dim, dtype=torch.float32, seed=3, scale=0.2)).to(dtype)
    x64 = x.double()
    ref64 = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    check(ops.rmsnorm(x, w, 1e-6), reference.rmsnorm(x, w, 1e-6), ref64)
    out, new_res = ops.fused_add_rmsnorm(x, res, w, 1e-6)
    ref_out, ref_res = reference.fused_add_rmsnorm(x, res, w, 1e-6)
    assert torch.equal(new_res, ref_res)
    s64 = x64 + res.double()
    check(out, ref_out, s64 / torch.sqrt(s64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double())
    # per-head norm on a strided [T, H, D] view (Qwen3 q/k norm)
    q = x[:, : (dim // 64 - 1) * 64].reshape(rows, -1, 64) if dim >= 128 else x.reshape(rows, -1, 32)
    wq = w[: q.shape[-1]].contiguous()
    check(ops.rmsnorm(q, wq, 1e-6), reference.rmsnorm(q, wq, 1e-6), rmsnorm64(q, wq, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tokens", [1, 7, 513])
@pytest.mark.parametrize("hq,hkv,dim", [(32, 8, 128), (9, 3, 64), (16, 1, 256), (14, 2, 64)])
def test_rotary(dtype: torch.dtype, tokens: int, hq: int, hkv: int, dim: int) -> None:
    qkv = randn(tokens, (hq + 2 * hkv) * dim, dtype=dtype, seed=4)
    q = qkv[:, : hq * dim].reshape(tokens, hq, dim)
    k = qkv[:, hq * dim : (hq + hkv) * dim].reshape(tokens, hkv, dim)
    v_before = qkv[:, (hq + hkv) * dim :].clone()
    table = rope_table(4096, dim, dtype)
    pos = torch.randperm(4096, device=DEV)[:tokens]
    q_ref, k_ref = q.clone(), k.clone()
    reference.rotary_(q_ref, k_ref, pos, table)
    q64, k64 = rotary64(q, pos, table), rotary64(k, pos, table)
    ops.rotary_(q, k, pos, table)
    assert torch.equal(qkv[:, (hq + hkv) * dim :], v_before)
    check(q, q_ref, q64, rounding_may_differ=True)
    check(k, k_ref, k64, rounding_may_differ=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tokens,heads", [(1, 16), (8, 16), (48, 128)])
def test_latent_rows(dtype: torch.dtype, tokens: int, heads: int) -> None:
    """DeepSeek's new latent rows in one launch (norm, both rotations, the pool's rows at their
    slots) against the unfused ops on the torch path and float64."""
    rank, rope = 512, 64
    kv = randn(tokens, rank + rope, dtype=dtype, seed=7, scale=3.0)
    q = randn(tokens, heads, 128 + rope, dtype=dtype, seed=8)
    w = (1 + randn(rank, dtype=torch.float32, seed=9, scale=0.2)).to(dtype)
    table = rope_table(4096, rope, dtype)
    pos = torch.randperm(4096, device=DEV)[:tokens]
    loc = torch.randperm(4 * tokens, device=DEV)[:tokens]
    pool = torch.zeros(4 * tokens, 1, rank + rope, dtype=dtype, device=DEV)
    q_ref, k_pe = q.clone(), kv[:, None, rank:].clone()
    with ops.use_backend("torch"):
        ops.rotary_(q_ref[..., 128:], k_pe, pos, table)
        row_ref = torch.cat([ops.rmsnorm(kv[:, :rank], w, 1e-6), k_pe[:, 0]], dim=-1)
    row64 = torch.cat([rmsnorm64(kv[:, :rank], w, 1e-6), rotary64(kv[:, None, rank:], pos, table)[:, 0]], dim=-1)
    q64 = rotary64(q[..., 128:], pos, table)
    assert ops.latent_rows_(kv, q[..., 128:], pos, table, w, 1e-6, rank, pool, loc)
    check(kv[:, :rank], row_ref[:, :rank], row64[:, :rank])  # the norm: rounds where torch rounds
    check(kv[:, rank:], row_ref[:, rank:], row64[:, rank:], rounding_may_differ=True)
    check(q[..., 128:], q_ref[..., 128:], q64, rounding_may_differ=True)
    assert torch.equal(pool[loc, 0], kv)
    assert int((pool.abs().sum(dim=(1, 2)) > 0).sum()) == tokens


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tokens,inter", [(1, 14336), (513, 14336), (7, 1536), (3, 100)])
def test_silu_and_mul(dtype: torch.dtype, tokens: int, inter: int) -> None:
    gate_up = randn(tokens, 2 * inter, dtype=dtype, seed=5, scale=4.0)
    g, u = gate_up.double().chunk(2, dim=-1)
    check(ops.silu_and_mul(gate_up), reference.silu_and_mul(gate_up), g / (1 + torch.exp(-g)) * u)


def test_ops_capture_in_a_cuda_graph() -> None:
    """All four ops captured once, replayed on new data written into the same static inputs."""
    t, h, hq, hkv, d, inter = 5, 512, 8, 2, 64, 768
    dt = torch.bfloat16
    x, res = torch.zeros(t, h, device=DEV, dtype=dt), torch.zeros(t, h, device=DEV, dtype=dt)
    qkv = torch.zeros(t, (hq + 2 * hkv) * d, device=DEV, dtype=dt)
    gate_up = torch.zeros(t, 2 * inter, device=DEV, dtype=dt)
    pos = torch.zeros(t, dtype=torch.long, device=DEV)
    w, table = 1 + randn(h, dtype=dt, seed=6, scale=0.1), rope_table(1024, d, dt)

    def step() -> tuple[torch.Tensor, ...]:
        q = qkv[:, : hq * d].view(t, hq, d)
        k = qkv[:, hq * d : (hq + hkv) * d].view(t, hkv, d)
        ops.rotary_(q, k, pos, table)
        return (ops.rmsnorm(x, w, 1e-6), *ops.fused_add_rmsnorm(x, res, w, 1e-6), ops.silu_and_mul(gate_up))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # compile + warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for seed in (10, 20):
        for buf, s in ((x, seed), (res, seed + 1), (qkv, seed + 2), (gate_up, seed + 3)):
            buf.copy_(randn(*buf.shape, dtype=dt, seed=s))
        pos.copy_(torch.randperm(1024, device=DEV)[:t])
        qkv0 = qkv.clone()
        graph.replay()
        torch.cuda.synchronize()
        q_ref = qkv0[:, : hq * d].reshape(t, hq, d).clone()
        k_ref = qkv0[:, hq * d : (hq + hkv) * d].reshape(t, hkv, d).clone()
        reference.rotary_(q_ref, k_ref, pos, table)
        assert rel_err(qkv[:, : hq * d].reshape(t, hq, d), q_ref) <= 1e-2
        assert rel_err(qkv[:, hq * d : (hq + hkv) * d].reshape(t, hkv, d), k_ref) <= 1e-2
        refs = (reference.rmsnorm(x, w, 1e-6), *reference.fused_add_rmsnorm(x, res, w, 1e-6),
                reference.silu_and_mul(gate_up))
        for out, ref in zip(outs, refs):
            assert rel_err(out, ref) <= 1e-2


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_model_triton_ops_match_torch_ops(tiny_checkpoint, arch: str, dtype: torch.dtype) -> None:
    folder = tiny_checkpoint(arch, num_hidden_layers=5) if arch == "llama" else tiny_checkpoint(arch)
    model = load_checkpoint(folder, dtype=dtype, device=DEV, progress=False).model
    model.aux_layers = (0, 2, 4) if arch == "llama" else (1,)

    def run() -> list[torch.Tensor]:
        pool = ReqToTokenPool(4, 32, DEV)
        alloc = PagedAllocator(pool, 34, 1)
        runner = ModelRunner(model, pool, 34, 1, "torch_native")
        rows = [pool.alloc(), pool.alloc()]
        for r in rows:
            assert r is not None and alloc.ensure(r, 16)
        toks = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(7)).tolist()
        outs = [
            runner.forward(runner.make_batch(ForwardMode.EXTEND, toks[0][:12] + toks[1][:9], rows, [12, 9], [12, 9],
                                             logits="all", capture_hidden=CaptureHidden.FULL)),
            runner.forward(runner.make_batch(ForwardMode.DECODE, [toks[0][12], toks[1][9]], rows, [13, 10], [1, 1],
                                             stride=1, capture_hidden=CaptureHidden.LAST)),
        ]
        return [t for o in outs for t in (o.logits, o.hidden, o.aux_hidden) if t is not None]

    with ops.use_backend("torch"):
        ref = run()
    got = run()  # auto: CUDA -> Triton
    for a, b in zip(got, ref):
        assert rel_err(a, b) <= (1e-5 if dtype == torch.float32 else 2e-2)


# ---- timing ------------------------------------------------------------------------------------
def _graph_us(fn: Callable[[], object], reps: int = 20, replays: int = 30) -> float:
    """Microseconds per ``fn()`` from a CUDA graph holding ``reps`` calls (launch cost excluded,
    as in the engine's graphed decode step)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    return gemv_config.graph_seconds(fn, reps, replays) * 1e6


def _eager_us(fn: Callable[[], object], iters: int = 200) -> float:
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / iters


HIDDEN, HQ, HKV, HEAD_DIM, INTER, LAYERS = 4096, 32, 8, 128, 14336, 32  # Llama-3.1-8B


def _layer_elementwise(t: int) -> tuple[Callable[[], None], Callable[[], None], int]:
    """(unfused, fused, bytes the fused kernels must move) for one 8B decoder layer's element-wise
    work at ``t`` tokens, bf16: residual add + input norm, RoPE on q/k, residual add +
    post-attention norm, SiLU*up. Unfused = the pre-fusion torch code, op for op."""
    dt = torch.bfloat16
    w1, w2 = 1 + randn(HIDDEN, dtype=dt, seed=1, scale=0.1), 1 + randn(HIDDEN, dtype=dt, seed=2, scale=0.1)
    table = rope_table(8192, HEAD_DIM, dt)
    mlp_out, attn_out, res = (randn(t, HIDDEN, dtype=dt, seed=s) for s in (3, 4, 5))
    qkv = randn(t, (HQ + 2 * HKV) * HEAD_DIM, dtype=dt, seed=6)
    gate_up = randn(t, 2 * INTER, dtype=dt, seed=7)
    pos = torch.randint(0, 8192, (t,), device=DEV)
    q = qkv[:, : HQ * HEAD_DIM].view(t, HQ, HEAD_DIM)
    k = qkv[:, HQ * HEAD_DIM : (HQ + HKV) * HEAD_DIM].view(t, HKV, HEAD_DIM)

    def unfused() -> None:
        h = res + mlp_out
        reference.rmsnorm(h, w1, 1e-5)
        cos, sin = reference.cos_sin_at(pos, table)
        reference.rotate_half(q, cos, sin)
        reference.rotate_half(k, cos, sin)
        h = h + attn_out
        reference.rmsnorm(h, w2, 1e-5)
        reference.silu_and_mul(gate_up)

    def fused() -> None:
        _, r = ops.fused_add_rmsnorm(mlp_out, res, w1, 1e-5)
        ops.rotary_(q, k, pos, table)
        ops.fused_add_rmsnorm(attn_out, r, w2, 1e-5)
        ops.silu_and_mul(gate_up)

    # two fused norms (read x, res; write normed, res), q/k read + write, gate_up read + act write
    nbytes = 2 * (2 * 4 * t * HIDDEN + 2 * t * (HQ + HKV) * HEAD_DIM + 3 * t * INTER)
    return unfused, fused, nbytes


def test_decoder_layer_elementwise_timing() -> None:
    """Prints microseconds per layer, eager and graphed, and the projected saving per decode step
    (32 layers). Graphed times are what the engine's captured decode step pays."""
    lines = [f"\n8B-shape decoder layer, element-wise work only (bf16, {torch.cuda.get_device_name()})",
             f"{'T':>5} {'unfused eager':>14} {'fused eager':>12} {'unfused graph':>14} {'fused graph':>12} "
             f"{'speedup':>8} {'saved/step (32 layers)':>23} {'fused GB/s':>11}"]
    for t in (1, 512):
        unfused, fused, nbytes = _layer_elementwise(t)
        ue, fe, ug, fg = _eager_us(unfused), _eager_us(fused), _graph_us(unfused), _graph_us(fused)
        lines.append(f"{t:>5} {ue:>12.1f}us {fe:>10.1f}us {ug:>12.1f}us {fg:>10.1f}us {ug / fg:>7.2f}x "
                     f"{(ug - fg) * LAYERS / 1000:>20.3f} ms {nbytes / fg / 1e3:>11.0f}")
        assert fg < ug, "the fused element-wise work should be faster than the unfused code"
    print("\n".join(lines))

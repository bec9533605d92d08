"""Attention kernel benchmark of the ``triton`` backend (run it on the GPU machine).

* decode: one query per request over a paged cache, bs in {1, 8, 64} x context in {1k, 8k, 32k},
  Llama-3-8B heads (32 q / 8 kv, head_dim 128), bf16, page size 1 with shuffled slots. Reported:
  achieved bandwidth = KV bytes read (K + V of every cached position, plus the slot table) / time,
  and its fraction of the measured device-to-device copy bandwidth (measured first unless --peak-tbps is given: 3.01 TB/s on the H100, 4.28 on the H200).
* verify: TARGET_VERIFY, 4 tokens per request over an 8k context at bs in {1, 8, 64} (the extend
  kernel with KV splits, the path EAGLE's verify step takes), same bandwidth metric.
* prefill / extend: causal TFLOP/s of the triton extend kernel (prefix read through the paged
  pool) against torch ``scaled_dot_product_attention`` on dense, contiguous K/V (GQA expanded to
  MHA, so both do the same FLOPs): bs 1 x 4k, bs 8 x 1k, and 512 new tokens over an 8k prefix.

Timing: each measured call is one backend forward (KV store + attention kernels), replayed from a
CUDA graph of ``--inner`` forwards so CPU launch overhead is excluded; CUDA events; warm-up, then
the median of ``--repeats`` replays. Eager (un-graphed) times are reported too.

Only torch, triton and updraft are imported (the GPU machine has nothing else). ``--smoke`` runs
tiny shapes; on a CPU-only machine it uses the Triton interpreter and checks the plumbing only.

    python benchmarks/attention_bench.py --out results/attention_bench.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch

ROOT = Path(__file__).resolve().parents[1]
HQ, HKV, HEAD_DIM = 32, 8, 128


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON to this path")
    p.add_argument("--only", choices=("all", "decode", "verify", "prefill"), default="all")
    p.add_argument("--repeats", type=int, default=20, help="timed graph replays (median reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed forwards before capture and replays")
    p.add_argument("--inner", type=int, default=10, help="forwards per CUDA graph replay")
    p.add_argument("--peak-tbps", type=float, default=0.0,
                   help="reference bandwidth (device copy), TB/s; 0: measured on this GPU first")
    p.add_argument("--smoke", action="store_true", help="tiny shapes (CPU: Triton interpreter); checks plumbing, not speed")
    return p.parse_args(argv)


# ---- timing --------------------------------------------------------------------------------
def time_call(fn: Callable[[], Any], args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    """Median seconds per ``fn()``: from a CUDA graph of ``inner`` calls, and eagerly."""
    for _ in range(args.warmup):
        fn()
    if device.type != "cuda":  # smoke run on the interpreter: one eager timing
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        return {"graph_s": dt, "eager_s": dt, "graphed": 0.0}
    torch.cuda.synchronize()
    eager = []
    for _ in range(args.repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        eager.append(start.elapsed_time(end) / 1e3)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(args.inner):
                fn()
        graph.replay()
        torch.cuda.synchronize()
    except RuntimeError as exc:  # report eager time rather than lose the row
        print(f"  (CUDA graph capture failed, eager timing used: {str(exc)[:200]})", file=sys.stderr)
        return {"graph_s": statistics.median(eager), "eager_s": statistics.median(eager), "graphed": 0.0}
    times = []
    for _ in range(args.repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / args.inner)
    del graph
    return {"graph_s": statistics.median(times), "eager_s": statistics.median(eager), "graphed": 1.0}


# ---- setup ---------------------------------------------------------------------------------
class PagedSetup:
    """A KV pool with ``bs`` requests of ``seq_len`` positions each on shuffled page-1 slots,
    prefix K/V random, and a backend over it."""

    def __init__(self, bs: int, seq_len: int, heads: tuple[int, int, int], device: torch.device, gen: torch.Generator) -> None:
        from updraft.attention.triton_backend import TritonBackend
        from updraft.memory.pools import KVPool

        hq, hkv, dim = heads
        num_slots = bs * seq_len + 1  # + scratch slot 0
        self.pool = KVPool(1, num_slots, 1, hkv, dim, torch.bfloat16, device)
        self.pool.k_buffer[0].normal_(generator=gen)
        self.pool.v_buffer[0].normal_(generator=gen)
        perm = torch.randperm(num_slots - 1, device=device, generator=gen) + 1
        self.table = torch.zeros(bs + 1, seq_len + 8, dtype=torch.int32, device=device)
        self.table[1:, :seq_len] = perm.view(bs, seq_len).to(torch.int32)
        self.rows = torch.arange(1, bs + 1, device=device)
        self.backend = TritonBackend(self.pool, self.table, hq, hkv, dim)

    def gather(self, req: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Request ``req``'s first ``length`` positions as dense [length, hkv, dim] K and V."""
        slots = self.table[req + 1, :length].long()
        return self.pool.k_buffer[0][slots], self.pool.v_buffer[0][slots]


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_offset: int) -> torch.Tensor:
    """fp32 check for one request: q [n, hq, d] at positions offset.., k/v [L, hkv, d]."""
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, 1)
    vf = v.float().repeat_interleave(group, 1)
    s = torch.einsum("nhd,lhd->hnl", q.float(), kf) * q.shape[-1] ** -0.5
    qpos = torch.arange(q.shape[0], device=q.device)[:, None] + causal_offset
    s = s.masked_fill(torch.arange(k.shape[0], device=q.device)[None, :] > qpos, float("-inf"))
    return torch.einsum("hnl,lhd->nhd", s.softmax(-1), vf)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-9)).item()


# ---- decode / verify -----------------------------------------------------------------------
def bench_decode(
    bs: int, ctx: int, heads: tuple[int, int, int], args: argparse.Namespace, device: torch.device, stride: int = 1
) -> dict[str, Any]:
    """DECODE (``stride`` 1, the decode kernel) or TARGET_VERIFY (``stride`` = ndt, the extend
    kernel with KV splits): ``bs`` requests whose KV length after this step is ``ctx``."""
    from updraft.batch import ForwardMode, make_forward_batch

    hq, hkv, dim = heads
    mode = ForwardMode.DECODE if stride == 1 else ForwardMode.TARGET_VERIFY
    gen = torch.Generator(device=device).manual_seed(bs * 100003 + ctx + stride)
    st = PagedSetup(bs, ctx, heads, device, gen)
    n = bs * stride
    batch = make_forward_batch(
        mode,
        torch.zeros(n, dtype=torch.long, device=device),
        st.rows,
        torch.full((bs,), ctx, dtype=torch.int32),
        torch.full((bs,), stride, dtype=torch.int32),
        st.table,
        logits="none",
        stride=stride,
    )
    q = torch.randn(n, hq, dim, device=device, generator=gen).to(torch.bfloat16)
    k = torch.randn(n, hkv, dim, device=device, generator=gen).to(torch.bfloat16)
    v = torch.randn(n, hkv, dim, device=device, generator=gen).to(torch.bfloat16)
    batch.attn_backend = st.backend
    st.backend.init_forward_metadata(batch)
    out = st.backend.forward(q, k, v, 0, batch)
    kr, vr = st.gather(0, ctx)  # after the forward: includes the stored new tokens
    err = rel_err(out[:stride], dense_attention(q[:stride], kr, vr, ctx - stride))
    t = time_call(lambda: st.backend.forward(q, k, v, 0, batch), args, device)
    kv_bytes = bs * ctx * (2 * hkv * dim * 2 + 4)  # K + V bf16, plus the int32 slot table
    bw = kv_bytes / t["graph_s"]
    return {
        "mode": mode.name,
        "bs": bs,
        "context": ctx,
        "tokens_per_req": stride,
        "kv_splits": batch.attn_metadata.plan.num_kv_splits,
        "time_us": t["graph_s"] * 1e6,
        "eager_us": t["eager_s"] * 1e6,
        "graphed": bool(t["graphed"]),
        "kv_gb": kv_bytes / 1e9,
        "bandwidth_tbps": bw / 1e12,
        "fraction_of_peak": bw / (args.peak_tbps * 1e12),
        "rel_err_req0": err,
    }


# ---- prefill / extend ----------------------------------------------------------------------
class PrefillCase(NamedTuple):
    """One EXTEND forward's inputs over a paged pool, and SDPA's dense equivalent (GQA expanded to
    MHA, causal aligned to the bottom right, so both do the same FLOPs)."""

    setup: PagedSetup
    batch: Any
    q: torch.Tensor
    k_new: torch.Tensor
    v_new: torch.Tensor
    sdpa: Callable[[], torch.Tensor]
    flops: float

    def reference(self) -> torch.Tensor:
        """SDPA's output as the backend's [tokens, heads, dim]."""
        out = self.sdpa()
        return out.transpose(1, 2).reshape(self.q.shape)


def prefill_case(bs: int, prefix: int, ext: int, heads: tuple[int, int, int], device: torch.device) -> PrefillCase:
    import torch.nn.functional as F

    from updraft.batch import ForwardMode, make_forward_batch

    hq, hkv, dim = heads
    seq = prefix + ext
    gen = torch.Generator(device=device).manual_seed(bs * 7919 + seq)
    st = PagedSetup(bs, seq, heads, device, gen)
    batch = make_forward_batch(
        ForwardMode.EXTEND,
        torch.zeros(bs * ext, dtype=torch.long, device=device),
        st.rows,
        torch.full((bs,), seq, dtype=torch.int32),
        torch.full((bs,), ext, dtype=torch.int32),
        st.table,
        logits="none",
    )
    q = torch.randn(bs * ext, hq, dim, device=device, generator=gen).to(torch.bfloat16)
    # The new tokens' K/V are the ones already in their slots, so the dense baseline sees the same.
    k_new = st.pool.k_buffer[0][batch.out_cache_loc].clone()
    v_new = st.pool.v_buffer[0][batch.out_cache_loc].clone()
    kd = torch.stack([st.gather(i, seq)[0] for i in range(bs)]).repeat_interleave(hq // hkv, 2).transpose(1, 2).contiguous()
    vd = torch.stack([st.gather(i, seq)[1] for i in range(bs)]).repeat_interleave(hq // hkv, 2).transpose(1, 2).contiguous()
    qd = q.view(bs, ext, hq, dim).transpose(1, 2).contiguous()
    mask = None
    if prefix:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(ext, seq)

    def sdpa() -> torch.Tensor:
        if mask is None:
            return F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
        return F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask)

    flops = 4 * hq * dim * bs * (ext * prefix + ext * (ext + 1) / 2)
    return PrefillCase(st, batch, q, k_new, v_new, sdpa, flops)


def bench_prefill(bs: int, prefix: int, ext: int, heads: tuple[int, int, int], args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    c = prefill_case(bs, prefix, ext, heads, device)
    backend, batch = c.setup.backend, c.batch
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(c.q, c.k_new, c.v_new, 0, batch)
    err = rel_err(out, c.reference())
    t_tri = time_call(lambda: backend.forward(c.q, c.k_new, c.v_new, 0, batch), args, device)
    t_sdpa = time_call(c.sdpa, args, device)
    return {
        "bs": bs,
        "prefix": prefix,
        "new_tokens": ext,
        "kv_splits": batch.attn_metadata.plan.num_kv_splits,
        "triton_us": t_tri["graph_s"] * 1e6,
        "sdpa_us": t_sdpa["graph_s"] * 1e6,
        "triton_tflops": c.flops / t_tri["graph_s"] / 1e12,
        "sdpa_tflops": c.flops / t_sdpa["graph_s"] / 1e12,
        "triton_vs_sdpa": t_sdpa["graph_s"] / t_tri["graph_s"],
        "rel_err_vs_sdpa": err,
    }


# ---- report --------------------------------------------------------------------------------
def markdown(rows: list[dict[str, Any]], cols: list[tuple[str, str, str]]) -> str:
    head = "| " + " | ".join(c[1] for c in cols) + " |"
    sep = "|" + "|".join("---:" for _ in cols) + "|"
    body = ["| " + " | ".join(format(r[c[0]], c[2]) for c in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def copy_tbps(device: torch.device, nbytes: int = 2 << 30) -> float:
    """The device-to-device copy bandwidth in TB/s (bytes read + written, median of 10 copies of
    ``nbytes``): the reference of the bandwidth shares (H100 3.01, H200 4.28). Off CUDA (smoke
    runs, whose shares mean nothing) the H100's figure."""
    if device.type != "cuda":
        return 3.01
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * nbytes / statistics.median(times) / 1e12


def meta(device: torch.device) -> dict[str, Any]:
    import triton

    from updraft.provenance import git_commit

    commit = git_commit()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (triton interpreter)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "commit": commit,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        if not args.smoke:
            print("attention_bench: needs a CUDA GPU (use --smoke for a CPU interpreter dry run)", file=sys.stderr)
            return 2
        os.environ["TRITON_INTERPRET"] = "1"  # before updraft's triton kernels are defined
    sys.path.insert(0, str(ROOT))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.smoke:
        heads = (4, 2, 32)
        decode_grid = [(1, 64), (3, 100)]
        verify_grid = [(2, 70, 4)]
        prefill_grid = [(1, 0, 48), (2, 0, 20), (1, 40, 8)]
    else:
        heads = (HQ, HKV, HEAD_DIM)
        decode_grid = [(bs, ctx) for bs in (1, 8, 64) for ctx in (1024, 8192, 32768)]
        verify_grid = [(bs, 8192, 4) for bs in (1, 8, 64)]
        prefill_grid = [(1, 0, 4096), (8, 0, 1024), (1, 8192, 512)]
    if not args.peak_tbps:
        args.peak_tbps = round(copy_tbps(device), 3)
    results: dict[str, Any] = {"meta": meta(device), "heads": list(heads), "peak_tbps": args.peak_tbps}
    memory_cols = [
        ("bs", "bs", "d"), ("context", "context", "d"), ("tokens_per_req", "tokens/req", "d"),
        ("kv_splits", "splits", "d"), ("time_us", "time (us)", ".1f"), ("eager_us", "eager (us)", ".1f"),
        ("bandwidth_tbps", "TB/s", ".2f"), ("fraction_of_peak", f"of {args.peak_tbps} TB/s", ".0%"),
        ("rel_err_req0", "rel err", ".1e"),
    ]
    prefill_cols = [
        ("bs", "bs", "d"), ("prefix", "prefix", "d"), ("new_tokens", "new", "d"),
        ("kv_splits", "splits", "d"), ("triton_us", "triton (us)", ".1f"), ("sdpa_us", "sdpa (us)", ".1f"),
        ("triton_tflops", "triton TFLOP/s", ".1f"), ("sdpa_tflops", "sdpa TFLOP/s", ".1f"),
        ("triton_vs_sdpa", "speed vs sdpa", ".2f"), ("rel_err_vs_sdpa", "rel err", ".1e"),
    ]
    sections: list[tuple[str, str, list[Callable[[], dict[str, Any]]], list[tuple[str, str, str]]]] = [
        ("decode", "Decode (bf16, page 1, shuffled slots; decode kernel)",
         [lambda bs=bs, ctx=ctx: bench_decode(bs, ctx, heads, args, device) for bs, ctx in decode_grid], memory_cols),
        ("verify", "TARGET_VERIFY (bf16, page 1, shuffled slots; extend kernel with KV splits)",
         [lambda bs=bs, ctx=ctx, n=n: bench_decode(bs, ctx, heads, args, device, stride=n) for bs, ctx, n in verify_grid],
         memory_cols),
        ("prefill", "Prefill / extend (bf16, causal; SDPA on dense contiguous K/V)",
         [lambda b=b, p=p, e=e: bench_prefill(b, p, e, heads, args, device) for b, p, e in prefill_grid], prefill_cols),
    ]
    t0 = time.time()
    for key, title, runs, cols in sections:
        if args.only not in ("all", key):
            continue
        results[key] = []
        for run in runs:
            results[key].append(run())
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(f"\n### {title}\n")
        print(markdown(results[key], cols))
    results["wall_s"] = time.time() - t0
    print(f"\n{results['meta']['device']}, torch {results['meta']['torch']}, triton {results['meta']['triton']}, {results['wall_s']:.0f} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

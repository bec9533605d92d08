"""MLA decode attention of the ``mla`` backend (run it on the GPU machine).

* decode: one query per request over a paged latent cache (DeepSeek: kv_lora_rank 512 + rope 64,
  one latent row of 1152 bytes per token in bf16), bs in {8, 64} x context in {8k, 32k} x heads
  in {16 (V2-Lite), 128 (V3)}. Reported: achieved bandwidth = bytes of the latent cache read +
  q + out / time, and its share of the device copy bandwidth (measured first unless --peak-tbps is given: 3.01 TB/s on the H100, 4.28 on the H200); the goal is
  >= 70% at bs 8 and 64. Also the achieved TFLOP/s: at 128 heads a latent row feeds
  128 x (2 x 576 + 2 x 512) = 278k FLOPs, ~242 FLOP per byte, so 70% of the copy bandwidth there
  needs ~510 dense bf16 TFLOP/s: that shape is bound by the tensor cores, not by memory.
* verify (``--only verify`` or all): TARGET_VERIFY, 4 tokens per request over an 8k context (the
  same decode kernel, 4 x heads rows per program), same metric.

Timing: each measured call is one backend forward (K store + attention kernel + split merge),
replayed from a CUDA graph of ``--inner`` forwards (CUDA events, median of ``--repeats``), as in
``attention_bench.py``, whose timing and report helpers this script uses. ``--sweep`` also times
other tiles and split counts per shape (a tuning run: the best of each shape is marked);
``--pipeline-sweep`` the decode kernel's pipelining (the tiles before the slot prefetch, 64- to
16-key tiles at 3-4 stages, split counts, and the forward without its K store or split merge:
what each launch costs); ``--profile`` adds GPU time per kernel per forward.
``--smoke``: tiny shapes (on a CPU: the Triton interpreter), plumbing and correctness only.

    python benchmarks/mla_bench.py --out results/mla_bench.json [--sweep]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from attention_bench import copy_tbps, markdown, meta, rel_err, time_call  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RANK, ROPE = 512, 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON to this path")
    p.add_argument("--only", choices=("all", "decode", "verify"), default="all")
    p.add_argument("--repeats", type=int, default=20, help="timed graph replays (median reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed forwards before capture and replays")
    p.add_argument("--inner", type=int, default=10, help="forwards per CUDA graph replay")
    p.add_argument("--page-size", type=int, default=1, help="KV page size (pages shuffled over the pool)")
    p.add_argument("--peak-tbps", type=float, default=0.0,
                   help="reference bandwidth (device copy), TB/s; 0: measured on this GPU first")
    p.add_argument("--sweep", action="store_true", help="also time other tiles / split counts per shape (tuning)")
    p.add_argument("--pipeline-sweep", action="store_true",
                   help="key tiles x stages (3+: slots prefetched) x splits, and the forward without its store / merge")
    p.add_argument("--latent", action="store_true",
                   help="also the model's side: rotary + norm + cat + forward against the latent kernel + forward_stored")
    p.add_argument("--profile", action="store_true", help="also report GPU time per kernel per forward (torch profiler)")
    p.add_argument("--heads", type=int, nargs="*", default=None, help="only these head counts (default 16 and 128)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes (CPU: Triton interpreter); checks plumbing, not speed")
    p.add_argument("--table-width", type=int, default=0,
                   help="req_to_token width (the engine's max_model_len; it caps the split count); 0: the context + 8")
    return p.parse_args(argv)


@dataclass(frozen=True)
class Variant:
    """A tile / split override (None: the backend's policy)."""

    block_rows: int | None = None
    block_n: int | None = None
    splits: int | None = None
    warps: int | None = None
    stages: int | None = None
    skip: str | None = None  # diagnostics: "store" or "merge" left out of the timed forward (wrong output)
    #: ``--latent``: the model's side timed with the forward. "unfused": rotary, norm and cat of the
    #: new latent rows, then ``forward`` (its store); "latent": ``ops.latent_rows_`` storing them,
    #: then ``forward_stored``; "stored": ``forward_stored`` alone (the attention after that kernel)
    model_side: str | None = None

    @property
    def label(self) -> str:
        if self == Variant():
            return "policy"
        parts = [f"{k}={v}" for k, v in (("rows", self.block_rows), ("keys", self.block_n), ("splits", self.splits),
                                          ("warps", self.warps), ("stages", self.stages)) if v]
        parts += [f"no {self.skip}"] if self.skip else []
        parts += [f"model {self.model_side}"] if self.model_side else []
        return ",".join(parts)

    @property
    def tiled(self) -> bool:
        return any((self.block_rows, self.block_n, self.warps, self.stages))


def pipeline_variants(bs: int, stride: int) -> list[Variant]:
    """The decode kernel's pipelining (``--pipeline-sweep``): the tiles before this change (slots
    loaded in the block that uses them, 2 stages: one latent buffer), the policy, tiles whose
    stages double-buffer the latent tile with the slots a block ahead, split counts around the
    policy's; then the policy without its K store or split merge (diagnostics: what each launch
    costs)."""
    if stride == 1:
        old = Variant(16, 64, 32 if bs <= 8 else 8, 4, 2)
        tiles = [(16, 64, 3), (16, 32, 3), (16, 32, 4)]
        splits: tuple[int | None, ...] = (None, 8, 32) if bs <= 8 else (None, 4, 8)
    else:
        old = Variant(32, 32, None, 8, 2)
        tiles = [(32, 32, 3), (32, 64, 3), (16, 64, 3)]
        splits = (None, 8, 16)
    out = [old, Variant()]
    for rows, keys, stages in tiles:
        out += [Variant(rows, keys, s, 4 if rows <= 16 else 8, stages) for s in splits]
    return out + [Variant(skip="store"), Variant(skip="merge")]


def sweep_variants(heads: int, stride: int) -> list[Variant]:
    """Tiles x split counts (past the policy's cap: 32 and 64 splits) x warps x pipeline stages."""
    rows = [r for r in (16, 32, 64) if r <= max(16, heads * stride)]
    return [Variant(r, n, s, w, g) for r in rows for n in (32, 64) for s in (None, 8, 16, 32, 64) for w in (4, 8)
            for g in (2, 3)]


class LatentSetup:
    """``bs`` requests of ``ctx`` positions on shuffled pages of a latent pool (one layer),
    random latent rows, and an ``mla`` backend over it."""

    def __init__(self, bs: int, ctx: int, heads: int, rank: int, rope: int, page: int, device: torch.device,
                 gen: torch.Generator, table_width: int = 0) -> None:
        from updraft.attention.mla_backend import MLABackend
        from updraft.memory.pools import KVPool

        pages_per_req = -(-ctx // page)
        num_pages = bs * pages_per_req + 1  # + the scratch page 0
        self.pool = KVPool(1, num_pages, page, 1, rank + rope, torch.bfloat16, device, v_head_dim=rank, shared_kv=True)
        self.pool.k_buffer[0].normal_(generator=gen)
        order = (torch.randperm(num_pages - 1, device=device, generator=gen) + 1).view(bs, pages_per_req)
        pos = torch.arange(ctx, device=device)
        self.table = torch.zeros(bs + 1, max(ctx + 8, table_width), dtype=torch.int32, device=device)
        self.table[1:, :ctx] = (order[:, pos // page] * page + pos % page).to(torch.int32)
        self.rows = torch.arange(1, bs + 1, device=device)
        self.backend = MLABackend(self.pool, self.table, heads, 1, rank + rope, scale=(128 + rope) ** -0.5)

    def latent(self, req: int, length: int) -> torch.Tensor:
        return self.pool.k_buffer[0][self.table[req + 1, :length].long(), 0]


def reference(q: torch.Tensor, latent: torch.Tensor, rank: int, scale: float, stride: int) -> torch.Tensor:
    """fp32 attention of one request's ``stride`` queries (the last positions) over its latent rows."""
    s = torch.einsum("nhd,ld->hnl", q.float(), latent.float()) * scale
    qpos = torch.arange(stride, device=q.device)[:, None] + latent.shape[0] - stride
    s = s.masked_fill(torch.arange(latent.shape[0], device=q.device)[None, :] > qpos, float("-inf"))
    return torch.einsum("hnl,lc->nhc", s.softmax(-1), latent[:, :rank].float())


def bench(bs: int, ctx: int, heads: int, args: argparse.Namespace, device: torch.device, dims: tuple[int, int],
          stride: int = 1, variant: Variant = Variant()) -> dict[str, Any]:
    """DECODE (``stride`` 1) or TARGET_VERIFY (``stride`` = ndt): ``bs`` requests whose cache holds
    ``ctx`` positions after this step."""
    from updraft.attention.triton_kernels import TileConfig
    from updraft.batch import ForwardMode, make_forward_batch

    rank, rope = dims
    mode = ForwardMode.DECODE if stride == 1 else ForwardMode.TARGET_VERIFY
    gen = torch.Generator(device=device).manual_seed(bs * 100003 + ctx + heads + stride)
    st = LatentSetup(bs, ctx, heads, rank, rope, args.page_size, device, gen, args.table_width)
    be = st.backend
    if variant.tiled:
        policy = be._tile

        def tile(use_decode: bool, max_ext: int, bsz: int) -> TileConfig:
            t = policy(use_decode, max_ext, bsz)
            rows, keys = variant.block_rows or t.block_rows, variant.block_n or t.block_n
            # min_split: the policy's unless the variant sets the split count itself
            min_split = 2 * keys if variant.splits else max(t.min_split, 2 * keys)
            return TileConfig(rows, keys, min_split, variant.warps or (4 if rows <= 16 else 8),
                              variant.stages or t.num_stages)

        be._tile = tile  # type: ignore[method-assign]
    be.kv_splits_override = variant.splits
    if variant.skip == "store":  # what the K store launch costs (the output no longer sees the new row)
        be._store = lambda *a, **k: None  # type: ignore[method-assign]
    n = bs * stride
    batch = make_forward_batch(mode, torch.zeros(n, dtype=torch.long, device=device), st.rows,
                               torch.full((bs,), ctx, dtype=torch.int32), torch.full((bs,), stride, dtype=torch.int32),
                               st.table, logits="none", stride=stride)
    q = torch.randn(n, heads, rank + rope, device=device, generator=gen).to(torch.bfloat16)
    k = torch.randn(n, 1, rank + rope, device=device, generator=gen).to(torch.bfloat16)
    batch.attn_backend = be
    be.init_forward_metadata(batch)
    out = be.forward(q, k, k[..., :rank], 0, batch)
    err = rel_err(out[:stride], reference(q[:stride], st.latent(0, ctx), rank, be.scale, stride))
    call = model_side_call(variant.model_side, q, batch, rank, rope, ctx, gen) or (lambda: be.forward(q, k, k[..., :rank], 0, batch))
    t = time_call(call, args, device)
    kernels = profile_kernels(call, args.inner) if args.profile else None
    cache = bs * ctx * (rank + rope) * 2
    io = (q.numel() + out.numel()) * 2
    sec = t["graph_s"]
    plan = batch.attn_metadata.plan
    return {
        "mode": mode.name, "bs": bs, "context": ctx, "heads": heads, "tokens_per_req": stride, "variant": variant.label,
        "block_rows": plan.tile.block_rows, "block_n": plan.tile.block_n, "kv_splits": plan.num_kv_splits,
        "time_us": sec * 1e6, "eager_us": t["eager_s"] * 1e6, "graphed": bool(t["graphed"]),
        "cache_gb": cache / 1e9, "table_gb": bs * ctx * 4 / 1e9,
        "bandwidth_tbps": (cache + io) / sec / 1e12, "fraction_of_peak": (cache + io) / sec / (args.peak_tbps * 1e12),
        "tflops": n * heads * ctx * 2 * (2 * rank + rope) / sec / 1e12, "rel_err_req0": err,
        **({"kernels_us": kernels} if kernels is not None else {}),
    }


def model_side_call(side: str | None, q: torch.Tensor, batch: Any, rank: int, rope: int, ctx: int,
                    gen: torch.Generator) -> Any:
    """The timed call of a ``Variant.model_side`` (None without one): the new rows' latent and
    rope parts made as the DeepSeek layer makes them, then the backend (repeated calls rotate and
    renormalise the same rows again: the values stay finite, the work is the same)."""
    if side is None:
        return None
    from updraft import ops
    from updraft.ops import latent as latent_kernel

    be, n, dev = batch.attn_backend, q.shape[0], q.device
    kv = torch.randn(n, rank + rope, device=dev, generator=gen).to(torch.bfloat16)
    q_pe = torch.randn(n, q.shape[1], 128 + rope, device=dev, generator=gen).to(torch.bfloat16)[..., 128:]
    w = torch.ones(rank, device=dev, dtype=torch.bfloat16)
    f = torch.arange(ctx + 8, device=dev, dtype=torch.float32)[:, None] * torch.rand(rope // 2, device=dev, generator=gen)
    cos_sin = torch.cat([f.cos(), f.sin()], dim=-1).to(torch.bfloat16)
    pos = torch.full((n,), ctx - 1, dtype=torch.long, device=dev)
    pool = be.kv_pool.k_buffer[0]

    def unfused() -> torch.Tensor:
        ops.rotary_(q_pe, kv[:, None, rank:], pos, cos_sin)
        k_row = torch.cat([ops.rmsnorm(kv[:, :rank], w, 1e-6), kv[:, rank:]], dim=-1)[:, None]
        return be.forward(q, k_row, k_row[..., :rank], 0, batch)

    def latent() -> torch.Tensor:
        latent_kernel.latent_rows_(kv, q_pe, pos, cos_sin, w, 1e-6, rank, pool, batch.out_cache_loc)
        return be.forward_stored(q, kv[:, None], kv[:, None, :rank], 0, batch)

    return {"unfused": unfused, "latent": latent,
            "stored": lambda: be.forward_stored(q, kv[:, None], kv[:, None, :rank], 0, batch)}[side]


def profile_kernels(fn: Any, inner: int) -> dict[str, float]:
    """GPU microseconds per forward of each kernel (name -> us): ``decode_kernels.profile_replay``
    over one replay of a CUDA graph of ``inner`` forwards."""
    from decode_kernels import profile_replay

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return {k: round(v / inner, 2) for k, v in profile_replay(graph)[3].items()}


def run_variants(variants: list[Variant], bs: int, ctx: int, heads: int, args: argparse.Namespace,
                 device: torch.device, dims: tuple[int, int], stride: int) -> list[dict[str, Any]]:
    got = []
    from updraft.attention.triton_kernels import mla_decode

    for v in variants:
        merge = mla_decode.merge_splits
        if v.skip == "merge":  # diagnostics: the forward without its split merge launch
            mla_decode.merge_splits = lambda *a: None  # type: ignore[assignment]
        try:
            got.append(bench(bs, ctx, heads, args, device, dims, stride, v))
        except Exception as e:  # a tile the compiler rejects (shared memory) just loses  # noqa: BLE001
            print(f"  {heads}/{bs}/{ctx} {v.label}: {type(e).__name__}: {str(e)[:120]}")
        finally:
            mla_decode.merge_splits = merge
    return got


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        if not args.smoke:
            print("mla_bench: needs a CUDA GPU (use --smoke for a CPU interpreter dry run)", file=sys.stderr)
            return 2
        os.environ["TRITON_INTERPRET"] = "1"  # before updraft's triton kernels are defined
    sys.path.insert(0, str(ROOT))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.smoke:
        dims, grid = (32, 16), [(2, 70, 4), (3, 40, 8)]
    else:
        dims, grid = (RANK, ROPE), [(bs, ctx, h) for h in (args.heads or (16, 128)) for bs in (8, 64) for ctx in (8192, 32768)]
    sections = [("decode", 1, grid), ("verify", 4, [(bs, min(ctx, 8192), h) for bs, ctx, h in grid if ctx == grid[0][1]])]
    if not args.peak_tbps:
        args.peak_tbps = round(copy_tbps(device), 3)
    results: dict[str, Any] = {"meta": meta(device), "dims": list(dims), "page_size": args.page_size, "peak_tbps": args.peak_tbps}
    cols = [
        ("heads", "H", "d"), ("bs", "bs", "d"), ("context", "context", "d"), ("variant", "variant", "s"),
        ("block_rows", "rows", "d"), ("block_n", "keys", "d"), ("kv_splits", "splits", "d"), ("time_us", "time (us)", ".1f"),
        ("bandwidth_tbps", "TB/s", ".2f"), ("fraction_of_peak", f"of {args.peak_tbps} TB/s", ".0%"),
        ("tflops", "TFLOP/s", ".0f"), ("rel_err_req0", "rel err", ".1e"),
    ]
    t0 = time.time()
    for key, stride, shapes in sections:
        if args.only not in ("all", key):
            continue
        rows: list[dict[str, Any]] = []
        for bs, ctx, heads in shapes:
            variants = [Variant()] + (sweep_variants(heads, stride) if args.sweep else [])
            if args.pipeline_sweep:
                variants = pipeline_variants(bs, stride)
            if args.latent:
                variants = [Variant()] + [Variant(model_side=m) for m in ("unfused", "latent", "stored")]
            got = run_variants(variants, bs, ctx, heads, args, device, dims, stride)
            best = min(got, key=lambda r: r["time_us"])
            for r in got:
                r["variant"] += " *" if r is best and len(got) > 1 else ""
            rows += got
            if device.type == "cuda":
                torch.cuda.empty_cache()
        results[key] = rows
        print(f"\n### {'Decode' if stride == 1 else f'TARGET_VERIFY, {stride} tokens/request'} (bf16, latent {dims[0]} + {dims[1]}, "
              f"page {args.page_size}, shuffled pages; bytes = latent cache + q + out)\n")
        print(markdown(rows, cols))
        for r in rows:
            if "kernels_us" in r:
                top = ", ".join(f"{k} {v:.1f}" for k, v in list(r["kernels_us"].items())[:5])
                print(f"  kernels, us per forward ({r['bs']}/{r['context']}/{r['heads']} {r['variant']}): {top}")
    results["wall_s"] = time.time() - t0
    print(f"\n{results['meta']['device']}, torch {results['meta']['torch']}, triton {results['meta']['triton']}, {results['wall_s']:.0f} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

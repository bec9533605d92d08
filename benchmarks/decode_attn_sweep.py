"""Sweep the GQA decode kernel's launch knobs at decode and verify sizes (run it on the GPU).

The decode step of a small model is latency-bound: SmolLM2's decode attention took 8.6 us per
layer at 1k context on the H100 (a third of the step) for 0.8 MB of K/V. This times
``decode_attention`` directly (no backend) over KV splits x keys per block x warps x stages x
merge (in the launch, or a second launch), at the shapes the engine runs, and prints the best
configs per shape next to the backend's own policy (its split count and tile). Each timing is a
CUDA graph of ``--inner`` back-to-back calls (as the layers of a step are), median of
``--repeats`` replays; every config's output is checked against a dense fp32 reference first.

    python benchmarks/decode_attn_sweep.py --out DIR          # ~2 min on an H100
    python benchmarks/decode_attn_sweep.py --smoke            # CPU interpreter: plumbing only
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

if not torch.cuda.is_available():  # the interpreter must be chosen before triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_bench import PagedSetup, dense_attention, rel_err, time_call  # noqa: E402

from updraft.attention.triton_kernels import TileConfig  # noqa: E402
from updraft.attention.triton_kernels.decode import decode_attention  # noqa: E402

#: (name, q heads, kv heads, head dim)
MODELS = {"smollm2": (9, 3, 64), "llama8b": (32, 8, 128)}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="smollm2,llama8b")
    p.add_argument("--shapes", default="1x1024x1,1x1024x6,8x1024x1,8x1024x6",
                   help="bs x context x rows per request (1: decode, ndt: verify), comma-separated")
    p.add_argument("--splits", default="1,2,4,8,16,32,64")
    p.add_argument("--block-n", default="32,64")
    p.add_argument("--warps", default="2,4")
    p.add_argument("--stages", default="2,3")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--inner", type=int, default=30)
    p.add_argument("--table-width", type=int, default=8192, help="req_to_token width (the engine's max_model_len)")
    p.add_argument("--top", type=int, default=5, help="best configs printed per shape")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help="tiny shapes and one config (CPU interpreter)")
    return p.parse_args()


def policy(setup: PagedSetup, bs: int, stride: int) -> tuple[int, TileConfig]:
    """The backend's own split count and tile for this batch (what the engine runs today)."""
    be = setup.backend
    tile = be._tile(True, stride, bs)
    return be._num_kv_splits(be._base_programs(True, bs, stride, tile), tile), tile


def run_shape(model: str, bs: int, ctx: int, stride: int, args: argparse.Namespace, device: torch.device,
              gen: torch.Generator) -> dict[str, Any]:
    hq, hkv, dim = MODELS[model]
    setup = PagedSetup(bs, ctx, (hq, hkv, dim), device, gen)
    # The engine's table is max_model_len wide, and the split policy caps splits by that width.
    wide = torch.zeros(bs + 1, max(args.table_width, ctx + 8), dtype=torch.int32, device=device)
    wide[:, : setup.table.shape[1]] = setup.table
    setup.table = setup.backend.req_to_token = wide
    seq = torch.full((bs,), ctx, dtype=torch.int32, device=device)
    q = torch.randn(bs * stride, hq, dim, device=device, generator=gen).to(setup.pool.dtype)
    out = torch.empty_like(q)
    ref = torch.cat([dense_attention(q[b * stride:(b + 1) * stride], *setup.gather(b, ctx), ctx - stride)
                     for b in range(bs)])
    base_splits, base_tile = policy(setup, bs, stride)
    grid = ([(1, TileConfig(16, 16, 16, 1, 1), True)] if args.smoke else
            [(s, TileConfig(16, n, n, w, st), m) for s, n, w, st, m in itertools.product(
                [int(x) for x in args.splits.split(",")], [int(x) for x in args.block_n.split(",")],
                [int(x) for x in args.warps.split(",")], [int(x) for x in args.stages.split(",")], (True, False))])
    grid.append((base_splits, base_tile, True))  # the policy's own row last (its min_split may differ)
    rows = []
    for splits, tile, merge in grid:
        if splits == 1 and not merge:
            continue  # one split writes the output directly: nothing to merge
        tokens = bs * stride
        mid_o = torch.empty(tokens, hq, splits, dim, dtype=torch.float32, device=device)
        mid_lse = torch.full((tokens, hq, splits), float("-inf"), device=device)
        sem = torch.zeros(bs * hkv, dtype=torch.int32, device=device) if merge else None

        def call(splits: int = splits, tile: TileConfig = tile, mid_o: torch.Tensor = mid_o, mid_lse: torch.Tensor = mid_lse,
                 sem: torch.Tensor | None = sem) -> None:
            decode_attention(q, setup.pool.k_buffer[0], setup.pool.v_buffer[0], out, setup.table, setup.rows, seq,
                             mid_o, mid_lse, splits, dim ** -0.5, tile, device.type != "cuda", sem, stride)

        call()
        err = rel_err(out, ref)
        if err > 2e-2:
            raise SystemExit(f"{model} bs{bs} ctx{ctx} x{stride} splits={splits} {tile} merge={merge}: rel err {err:.3g}")
        t = time_call(call, args, device)
        rows.append({"splits": splits, "block_n": tile.block_n, "min_split": tile.min_split, "warps": tile.num_warps,
                     "stages": tile.num_stages, "merge_in_launch": merge, "us": t["graph_s"] * 1e6,
                     "policy": (splits, tile, merge) == (base_splits, base_tile, True)})
    best = sorted(rows, key=lambda r: r["us"])
    pol = next(r for r in rows if r["policy"])
    print(f"\n{model} bs {bs} ctx {ctx} rows/request {stride}: policy {pol['us']:.2f} us "
          f"(splits {base_splits}, block_n {base_tile.block_n}, min_split {base_tile.min_split}, warps {base_tile.num_warps}, "
          f"stages {base_tile.num_stages})")
    for r in best[: args.top]:
        print(f"  {r['us']:7.2f} us  splits {r['splits']:>2} block_n {r['block_n']:>3} warps {r['warps']} "
              f"stages {r['stages']} merge {'in launch' if r['merge_in_launch'] else 'second launch'}")
    return {"model": model, "bs": bs, "ctx": ctx, "stride": stride, "policy_us": pol["us"], "rows": rows}


def main() -> None:
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        args.smoke = True
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.smoke:
        shapes = [(1, 40, 1), (2, 40, 3)]
    gen = torch.Generator(device=device).manual_seed(0)
    results = [run_shape(m, bs, ctx, stride, args, device, gen)
               for m in args.models.split(",") for bs, ctx, stride in shapes]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        dev = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (interpreter)"
        (args.out / "decode_attn_sweep.json").write_text(json.dumps({"device": dev, "shapes": results}, indent=1))


if __name__ == "__main__":
    main()

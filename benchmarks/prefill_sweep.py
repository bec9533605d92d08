"""Prefill tiles of the ``triton`` backend's extend kernel against SDPA (GPU).

    python benchmarks/prefill_sweep.py --out DIR [--heads 8b,smollm2] [--quick]

Issue 14 names the extend kernel's prefill gap to ``scaled_dot_product_attention`` (0.47-0.78x on
the H100, ``results/2026-11-22-h100``): this times the production tile (``TritonBackend._tile``)
and a grid of others (query rows per program, keys per block, warps, pipeline stages) on the
shapes ``attention_bench.py`` reports (bs 1 x 4k, bs 8 x 1k, 512 new tokens over an 8k prefix),
for Llama-3-8B's heads (32 / 8 x 128) and SmolLM2's (9 / 3 x 64). Each call is one backend
forward (KV store, extend kernel, the merge when the tile's split policy splits), replayed from
a CUDA graph (``attention_bench.time_call``); SDPA runs on dense contiguous K/V with GQA
expanded, so both do the same FLOPs. Every config's output is checked against SDPA's (relative
error, reported; a config over 2e-2 is marked bad). Writes ``prefill_sweep.json`` under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_bench import meta, prefill_case, rel_err, time_call  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from updraft.attention.triton_kernels import TileConfig  # noqa: E402

HEADS = {"8b": (32, 8, 128), "smollm2": (9, 3, 64)}
SHAPES = ((1, 0, 4096), (8, 0, 1024), (1, 8192, 512))


QUICK = ((64, 32, 4, 2), (64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 4, 2), (128, 64, 4, 2), (128, 64, 8, 2),
         (128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3))
MORE_SHAPES = ((1, 0, 1024), (1, 0, 2048), (4, 0, 2048), (1, 4096, 1024), (8, 1024, 256))


def candidates(dim: int, quick: bool) -> list[TileConfig]:
    """Rows x warps pairs a register file can hold, x keys per block x stages (``quick``: the
    ones that won somewhere in the full grid on the H200, 2026-12-02)."""
    if quick:
        return [TileConfig(block_rows=r, block_n=n, min_split=2 * n, num_warps=w, num_stages=s) for r, n, w, s in QUICK]
    pairs = [(64, 4), (128, 4), (128, 8)] + ([(256, 8)] if dim <= 64 else [])
    return [TileConfig(block_rows=r, block_n=n, min_split=2 * n, num_warps=w, num_stages=s)
            for r, w in pairs for n in (32, 64, 128) for s in (2, 3, 4)]


def sweep_shape(heads: tuple[int, int, int], bs: int, prefix: int, ext: int, cfgs: list[TileConfig],
                args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    c = prefill_case(bs, prefix, ext, heads, device)
    st, batch, q, k_new, v_new, flops = c.setup, c.batch, c.q, c.k_new, c.v_new, c.flops
    if args.as_graph:  # a prefill graph's width: the backend keeps its split policy (no eager rule)
        batch.max_extend_len = ext
    ref = c.reference()
    t_sdpa = time_call(c.sdpa, args, device)["graph_s"]
    backend = st.backend
    production = backend._tile(False, ext, bs)
    rows = []
    for cfg in [production] + [x for x in cfgs if x != production]:
        backend._tile = lambda use_decode, max_ext, bsz, cfg=cfg: cfg  # type: ignore[method-assign]
        batch.attn_backend = backend
        try:
            backend.init_forward_metadata(batch)
            out = backend.forward(q, k_new, v_new, 0, batch)
            err = rel_err(out, ref)
            t = time_call(lambda: backend.forward(q, k_new, v_new, 0, batch), args, device)["graph_s"]
        except Exception as exc:  # noqa: BLE001 - a tile the SM cannot hold: recorded, not fatal
            rows.append(dict(heads="x".join(map(str, heads)), bs=bs, prefix=prefix, new=ext, cfg=cfg.__dict__,
                             production=cfg == production, error=f"{type(exc).__name__}: {str(exc)[:120]}"))
            continue
        rows.append(dict(heads="x".join(map(str, heads)), bs=bs, prefix=prefix, new=ext, cfg=cfg.__dict__,
                         production=cfg == production, splits=batch.attn_metadata.plan.num_kv_splits,
                         us=t * 1e6, sdpa_us=t_sdpa * 1e6, tflops=flops / t / 1e12, vs_sdpa=t_sdpa / t,
                         rel_err=err, bad=err > 2e-2))
    del backend._tile
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--heads", default="8b,smollm2", help="comma-separated of " + ", ".join(HEADS))
    ap.add_argument("--quick", action="store_true", help="the nine candidates of QUICK, and MORE_SHAPES too")
    ap.add_argument("--shapes", default="", help="bs/prefix/new,... instead of the default shapes, e.g. 1/0/1024")
    ap.add_argument("--production-only", action="store_true", help="only the tile TritonBackend picks")
    ap.add_argument("--as-graph", action="store_true",
                    help="plan as a prefill graph does (its captured width set): the split policy, not the eager rule")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--inner", type=int, default=5)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("prefill_sweep: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    shapes = SHAPES + (MORE_SHAPES if args.quick else ())
    if args.shapes:
        shapes = tuple(tuple(int(v) for v in s.split("/")) for s in args.shapes.split(","))
    for name in args.heads.split(","):
        heads = HEADS[name]
        cfgs = [] if args.production_only else candidates(heads[2], args.quick)
        for bs, prefix, ext in shapes:
            got = sweep_shape(heads, bs, prefix, ext, cfgs, args, device)
            rows += got
            ok = sorted((r for r in got if "us" in r and not r["bad"]), key=lambda r: r["us"])
            prod = next(r for r in got if r["production"])
            print(f"{name} bs {bs} prefix {prefix} new {ext}: sdpa {prod.get('sdpa_us', 0):.1f} us; production "
                  f"{prod.get('us', float('nan')):.1f} us ({prod.get('vs_sdpa', 0):.2f}x) {prod['cfg']}")
            for r in ok[:4]:
                c = r["cfg"]
                print(f"   {r['us']:8.1f} us {r['vs_sdpa']:.2f}x rows {c['block_rows']} n {c['block_n']} "
                      f"w {c['num_warps']} s {c['num_stages']} splits {r['splits']} err {r['rel_err']:.1e}")
            bad = [r for r in got if r.get("bad") or "error" in r]
            if bad:
                print(f"   {len(bad)} configs bad or failed, e.g. {bad[0].get('error', bad[0].get('rel_err'))}")
            (args.out / "prefill_sweep.json").write_text(json.dumps(dict(meta=meta(device), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

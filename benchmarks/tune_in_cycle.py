"""Small-M GEMM launch configs timed where they run: in the S = 5 cycle and the plain step.

    python benchmarks/tune_in_cycle.py --bs 1 --gemms qkv,o,gate_up,down --rows 6 --out DIR [--store]

``gemv_config.tune`` times a candidate in a CUDA graph of back-to-back launches of itself. In a
model step each launch follows another kernel and its result feeds the next, and the ranking can
differ: on the H100 (``results/2026-11-27-h100-split-rows``) SmolLM2's 24-row sweep winners
cost ~100 us a bs-4 cycle and split 48-row gate/up tiles 34-97 us a bs-8 cycle. This script
builds random-weight SmolLM2 engines once (plain, and speculative with the builtin head, S = 5,
CUDA graphs at ``--bs``), then for each candidate of each GEMM at the M bucket of ``--rows``
token rows: writes it into the user cache (``$UPDRAFT_CACHE``, set to a scratch folder unless
``--store``), recaptures both engines' graphs and times the greedy cycle and the plain step
(median device time of ``--iters`` replays). Prints each GEMM's table, fastest by ``cycle +
plain`` first (a bucket the plain step does not use costs it nothing); writes
``tune_in_cycle.json``; ``--store`` leaves each GEMM's winner in the cache (else the previous
config is put back). Which launches a bucket serves: at bs 1 the verify and draft extend take 6
rows, the chain and the plain step 1; at bs 8, 48 and 8.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from decode_kernels import SMOLLM2, GemmBench, gemm_cases  # noqa: E402
from spec_iteration import fake_requests, fused_ms, head_method, smollm_engine_config  # noqa: E402

from updraft.ops import gemv_config  # noqa: E402
from updraft.ops.gemv_config import GemvConfig  # noqa: E402

DT = torch.bfloat16


def grid(kind: str, n: int, k: int, bucket: int, head_dim: int, tiles: str = "all", warps: int = 0) -> list[GemvConfig]:
    """The candidates: the sweep's (``gemv_config.candidates``) at 3 stages (the stage count moved
    nothing in the sweeps), so a GEMM costs a few dozen recaptures; ``tiles`` "fma" / "dot" keeps
    one kind, ``warps`` > 0 one warp count."""
    cands = [c for c in gemv_config.candidates(kind, n, k, bucket, head_dim)
             if c.num_stages == 3 and tiles in ("all", "dot" if c.dot else "fma") and warps in (0, c.num_warps)]
    # tensor-core tiles first from 4 rows (``--max`` keeps the head of the list): FMA tiles cost
    # 0.1-1 ms a cycle there on the H100 (2026-11-27)
    return sorted(cands, key=lambda c: c.dot != (bucket >= 4))


def prefilter(name: str, kind: str, n: int, k: int, rows: int, cands: list[GemvConfig], keep: int) -> list[GemvConfig]:
    """The ``keep`` candidates fastest in isolation (``gemv_config.graph_seconds`` over rotating
    weight copies, as ``decode_kernels.py --tune`` times them), in that order: a 48-row bucket
    offers 36-54 tensor-core tiles at 3 stages, each a recapture of both engines (~4 s at bs 8)."""
    bench = GemmBench(SMOLLM2, name, kind, n, k, rows)
    timed = []
    for cfg in cands:
        try:
            call = bench.rotating(cfg)
            call()  # compile + warm
            timed.append((gemv_config.graph_seconds(call, 24), cfg))
        except Exception:  # noqa: BLE001 - a config the compiler rejects just loses
            continue
    timed.sort(key=lambda tc: tc[0])
    print(f"  {name}: {len(timed)} candidates in isolation, kept " +
          ", ".join(f"{c.block_n}x{c.block_k}/m{c.m_tile}/w{c.num_warps} {t * 1e6:.2f} us" for t, c in timed[:keep]),
          flush=True)
    return [c for _, c in timed[:keep]]


def engines(bs: int, context: int, head: str) -> tuple[Any, Any, list[Any], list[Any]]:
    """Plain and speculative engines over one random-weight SmolLM2 (the plain step's fused
    layers write nothing more for the head's captured layers), and ``bs`` parked requests each."""
    from updraft.bench.models import random_model
    from updraft.config import SpeculativeConfig
    from updraft.engine.engine import Engine

    loaded = random_model("random:smollm2-135m", DT, "cuda")
    base = smollm_engine_config("random", [bs], context)
    plain = Engine(base, loaded=loaded)
    spec_cfg = SpeculativeConfig(method=head_method(head), draft_model=head, num_steps=5, adaptive=False)
    spec = Engine(dataclasses.replace(base, speculative=spec_cfg), loaded=loaded)
    return plain, spec, fake_requests(plain, bs, context), fake_requests(spec, bs, context)


def measure(plain: Any, spec: Any, preqs: list[Any], sreqs: list[Any], iters: int) -> tuple[float, float]:
    """(greedy S = 5 cycle ms, plain step ms) with every graph captured anew."""
    for eng in (plain, spec):
        eng.driver.fused.graphs.clear()
    return fused_ms(spec, sreqs, iters, steps=5), fused_ms(plain, preqs, iters)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--rows", type=int, default=6, help="token rows whose M bucket is tuned (6 per request: a verify)")
    ap.add_argument("--gemms", default="qkv,o,gate_up,down", help="of qkv, o, gate_up, down, lm_head, head_qkv")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--head", default="builtin:smollm2")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--tiles", choices=("all", "fma", "dot"), default="all", help="only these candidates (the current config always)")
    ap.add_argument("--warps", type=int, default=0, help="only candidates of this many warps (0: all)")
    ap.add_argument("--max", type=int, default=0, help="at most this many candidates per GEMM (0: all)")
    ap.add_argument("--prefilter", type=int, default=0,
                    help="time every candidate in isolation first and recapture only this many fastest (0: off)")
    ap.add_argument("--store", action="store_true", help="keep each GEMM's winner in $UPDRAFT_CACHE")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if not args.store:
        os.environ["UPDRAFT_CACHE"] = tempfile.mkdtemp(prefix="tune_in_cycle_")
    dev = torch.device("cuda")
    bucket = gemv_config.m_bucket(args.rows)
    plain, spec, preqs, sreqs = engines(args.bs, args.context, args.head)
    base_cycle, base_plain = measure(plain, spec, preqs, sreqs, args.iters)
    print(f"bs {args.bs}, {args.rows} rows (bucket {bucket}): cycle {base_cycle:.4f} ms, plain {base_plain:.4f} ms",
          flush=True)
    result: dict[str, Any] = dict(device=torch.cuda.get_device_name(), bs=args.bs, rows=args.rows, bucket=bucket,
                                  base_cycle_ms=base_cycle, base_plain_ms=base_plain, gemms={})
    # head_qkv: the EAGLE-3 head's QKV (its two normalised inputs side by side, K = 2 x hidden): one
    # row a chain step at bs 1, six the draft extend's
    head_qkv = ("head_qkv", "qkv", SMOLLM2.q_size + 2 * SMOLLM2.kv_size, 2 * SMOLLM2.hidden_size)
    for name, kind, n, k in [*gemm_cases(SMOLLM2), head_qkv]:
        if name not in args.gemms.split(","):
            continue
        hd = SMOLLM2.head_dim if kind == "qkv" else 0
        key = gemv_config.key(kind, n, k, bucket, DT, dev, hd)
        before = gemv_config.lookup(kind, n, k, args.rows, DT, dev, hd)
        cands = grid(kind, n, k, bucket, hd, args.tiles, args.warps)
        if args.prefilter and name != "head_qkv":  # the head's two-input QKV has no isolated bench
            cands = prefilter(name, kind, n, k, args.rows, cands, args.prefilter)
        cands = ([before] + [c for c in cands if c != before])[: args.max or None]
        rows = []
        for cfg in cands:
            gemv_config.store(key, cfg)
            try:
                cyc, pl = measure(plain, spec, preqs, sreqs, args.iters)
            except Exception as e:  # noqa: BLE001 - a config the compiler rejects just loses
                print(f"  {name} {cfg}: {type(e).__name__}", flush=True)
                continue
            rows.append(dict(config=str(cfg), cycle_ms=cyc, plain_ms=pl, current=cfg == before))
            print(f"  {name} {cfg}: cycle {cyc:.4f} plain {pl:.4f}{'  (current)' if cfg == before else ''}", flush=True)
        rows.sort(key=lambda r: r["cycle_ms"] + r["plain_ms"])
        best = next(c for c in cands if str(c) == rows[0]["config"])
        gemv_config.store(key, best if args.store else before)
        result["gemms"][name] = dict(key=key, before=str(before), best=str(best), rows=rows)
        print(f"{name}: best {best} ({rows[0]['cycle_ms']:.4f} / {rows[0]['plain_ms']:.4f} ms), "
              f"current {before}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tune_in_cycle.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

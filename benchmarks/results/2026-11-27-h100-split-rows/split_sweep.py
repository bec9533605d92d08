"""SmolLM2's layer GEMMs at verify-block row counts, their token rows split over programs or not.

    python benchmarks/results/2026-11-27-h100-split-rows/split_sweep.py --out DIR [--m 48] [--store] [--head-qkv 1,6,48]

For each GEMM as the fused layer launches it (``decode_kernels.GemmBench``: QKV + RoPE + KV store
and gate/up + SiLU reading normed rows, o_proj / down adding the residual for the next norm) and
each M: the config in use now (the shipped table, or the heuristic), then a focused sweep of
configs with ``m_tile`` 16 and 32 (the new candidates) and of unsplit dot tiles, each timed in a
CUDA graph of back-to-back launches rotating over weight copies larger than L2. Prints the
fastest split and unsplit config per (GEMM, M) and their times; ``--store`` writes the winner of
each (GEMM, M bucket) into ``$UPDRAFT_CACHE/gemv_configs.json`` (what a later run then uses).
``--head-qkv``: the same for the EAGLE-3 head's QKV (``[norm(embedding rows) | norm2(feature)]``,
K = 2 x 576; never tuned before: the heuristic ran it) at those row counts (chain steps: 1; the
draft extend: 6 per request), over a wider candidate set at buckets of at most 16 rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from decode_kernels import DT, SMOLLM2, GemmBench, gemm_cases, graph_time  # noqa: E402

from updraft.ops import gemv_config  # noqa: E402
from updraft.ops.gemv_config import GemvConfig  # noqa: E402


def focused(kind: str, n: int, k: int, bucket: int, head_dim: int) -> list[GemvConfig]:
    """Split tiles (m_tile 16 / 32 below the bucket) and unsplit dot tiles of the same widths."""
    out = []
    for m_tile in (0, 16, 32):
        if m_tile >= bucket:
            continue
        rows = m_tile or bucket
        chunks = (128, 256) if rows <= 16 else (64, 128)
        for block in (8, 16, 32):
            for bk in chunks:
                for warps in (4, 8):
                    cfg = GemvConfig(block, min(bk, gemv_config.triton_next_pow2(k)), True, warps, 3, m_tile)
                    if gemv_config.allowed(kind, cfg, head_dim) and -(-gemv_config.units(kind, n, head_dim) // block) >= 8:
                        out.append(cfg)
    return sorted(set(out), key=lambda c: (c.m_tile, c.block_n, c.block_k, c.num_warps))


def head_candidates(n: int, k: int, bucket: int) -> list[GemvConfig]:
    if bucket > 16:
        return focused("qkv", n, k, bucket, 64)
    out = []
    for dot in ((False,) if bucket == 1 else (False, True)):
        for block in (4, 8, 16):
            for bk in (128, 256, 512):
                for warps, stages in ((4, 3), (4, 4), (8, 3)):
                    cfg = GemvConfig(block, bk, dot, warps, stages)
                    if gemv_config.allowed("qkv", cfg, 64) and (dot or cfg.rows("qkv") * bucket * bk <= 16384):
                        out.append(cfg)
    return out


def head_qkv(m: int, dev: torch.device) -> dict:
    """The EAGLE-3 head's QKV at SmolLM2's shape over ``m`` rows: returns the sweep's row."""
    from updraft.ops import gemv
    from updraft.ops.gemv import Prologue

    h, n, k = 576, 960, 1152
    table = torch.randn(49152, h, device=dev, dtype=DT)
    ids = torch.randint(0, 49152, (m,), device=dev)
    feat = torch.randn(m, h, device=dev, dtype=DT)
    nw, nw2 = torch.ones(h, device=dev, dtype=DT), torch.ones(h, device=dev, dtype=DT)
    pro = Prologue(norm_weight=nw, eps=1e-5, ids=ids, x2=feat, norm_weight2=nw2)
    ws = [torch.randn(n, k, device=dev, dtype=DT) * 0.02 for _ in range(8)]
    pools = [torch.zeros(4096, 3, 64, device=dev, dtype=DT) for _ in range(2)]
    loc, pos = torch.arange(m, device=dev) + 7, torch.arange(m, device=dev) + 100
    cs = torch.randn(8192, 64, device=dev, dtype=DT)

    def fns(cfg: GemvConfig | None) -> list:
        return [lambda w=w: gemv.qkv_rope_store(table, w, None, pro, num_heads=9, num_kv_heads=3, head_dim=64,
                                                k_pool=pools[0], v_pool=pools[1], loc=loc, positions=pos, cos_sin=cs,
                                                config=cfg) for w in ws]
    now = gemv_config.lookup("qkv", n, k, m, DT, dev, 64)
    t_now = graph_time(fns(now))
    timed = []
    for cfg in head_candidates(n, k, gemv_config.m_bucket(m)):
        try:
            timed.append((graph_time(fns(cfg)), cfg))
        except Exception as e:  # noqa: BLE001
            print(f"  head_qkv m={m} {cfg}: {type(e).__name__}")
    t_best, best = min(timed, key=lambda x: x[0])
    return dict(gemm="head_qkv", kind="qkv", n=n, k=k, m=m, now=str(now), now_us=t_now * 1e6, best=str(best),
                best_us=t_best * 1e6, win=best if t_best < t_now else now,
                all=[(str(c), t * 1e6) for t, c in sorted(timed, key=lambda x: x[0])])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--m", default="48")
    p.add_argument("--store", action="store_true")
    p.add_argument("--head-qkv", default="", help="row counts for the EAGLE-3 head's QKV sweep (e.g. 1,6,48)")
    p.add_argument("--skip-layers", action="store_true", help="only the head's QKV")
    args = p.parse_args()
    dev = torch.device("cuda")
    rows = []
    for m in (int(v) for v in args.head_qkv.split(",") if v):
        row = head_qkv(m, dev)
        win = row.pop("win")
        print(f"head_qkv m={m:2d} now {row['now_us']:6.2f} us | best {row['best_us']:6.2f}  {row['best']}", flush=True)
        if args.store:
            gemv_config.store(gemv_config.key("qkv", 960, 1152, gemv_config.m_bucket(m), DT, dev, 64), win)
        rows.append(row)
    for name, kind, n, k in ([] if args.skip_layers else gemm_cases(SMOLLM2)):
        if name == "lm_head":
            continue
        hd = SMOLLM2.head_dim if kind == "qkv" else 0
        for m in (int(v) for v in args.m.split(",")):
            b = GemmBench(SMOLLM2, name, kind, n, k, m)
            bucket = gemv_config.m_bucket(m)
            now = gemv_config.lookup(kind, n, k, m, DT, dev, hd)
            t_now = graph_time([b.fused(w, now) for w in b.w])
            timed = []
            for cfg in focused(kind, n, k, bucket, hd):
                try:
                    timed.append((graph_time([b.fused(w, cfg) for w in b.w]), cfg))
                except Exception as e:  # noqa: BLE001 - a config the compiler rejects just loses
                    print(f"  {name} m={m} {cfg}: {type(e).__name__}")
            best = {t: min((x for x in timed if (x[1].m_tile > 0) == t), key=lambda x: x[0], default=None)
                    for t in (False, True)}
            row = dict(gemm=name, kind=kind, n=n, k=k, m=m, now=str(now), now_us=t_now * 1e6,
                       best_unsplit=str(best[False][1]) if best[False] else None,
                       best_unsplit_us=best[False][0] * 1e6 if best[False] else None,
                       best_split=str(best[True][1]) if best[True] else None,
                       best_split_us=best[True][0] * 1e6 if best[True] else None,
                       all=[(str(c), t * 1e6) for t, c in sorted(timed, key=lambda x: x[0])])
            rows.append(row)
            print(f"{name:8s} m={m:2d} now {t_now * 1e6:6.2f} us | unsplit {row['best_unsplit_us'] or 0:6.2f} "
                  f"| split {row['best_split_us'] or 0:6.2f}  {row['best_split']}", flush=True)
            if args.store:
                win = min([(t_now, now)] + timed, key=lambda x: x[0])[1]
                gemv_config.store(gemv_config.key(kind, n, k, bucket, DT, dev, hd), win)
            del b
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"split_sweep{'-head' if args.skip_layers else ''}.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(), rows=rows), indent=1))


if __name__ == "__main__":
    main()

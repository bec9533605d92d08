"""A draft step's end in one launch against three (run it on the GPU).

``fused.draft_lm_head`` takes an EAGLE-3 draft step's final norm (with its residual add), LM head
and greedy pick (mapped to target ids) in one ``gemv.linear`` launch; without it a step runs
``fused_add_rmsnorm``, the LM head GEMM (cuBLAS on the weight, or the FP8 GEMV) and
``argmax_rows``. This times both at the draft heads' shapes and token rows, each as a CUDA graph
of back-to-back calls rotating over weight copies (``gemv_config.graph_seconds``), after checking
that both give the same picks. ``--tune`` first sweeps the one-launch kernel's configs (timed
with its prologue and argmax, as the draft runs it) into ``$UPDRAFT_CACHE/gemv_configs.json`` and
prints the entries, for ``updraft/ops/gemv_tuned.json`` where the one launch wins.

    python benchmarks/draft_head_bench.py --out DIR --tune
    python benchmarks/draft_head_bench.py --shapes 8192x576 --rows 1,8 --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path

import torch

from updraft import ops
from updraft.ops import gemv, gemv_config
from updraft.spec import sampling_kernels

#: ``NxK[:fp8]``: SmolLM2's shipped head (8,192-token draft vocabulary, width 576) on its bf16
#: weight; the Llama-3.1-8B shape's EAGLE-3 head (32,000 x 4,096) on its FP8 copy, as "auto" serves it.
SHAPES = "8192x576,32000x4096:fp8"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--rows", default="1,2,4,8,16", help="token rows (a draft step's batch size)")
    p.add_argument("--tune", action="store_true")
    p.add_argument("--reps", type=int, default=24)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args()


def bench_shape(n: int, k: int, fp8: bool, rows: list[int], tune: bool, reps: int) -> list[dict]:
    dev = torch.device("cuda")
    copies = max(2, min(4, math.ceil(100e6 / (n * k * 2))))
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    weights = [gemv.quantize_rows_fp8(w) for w in ws] if fp8 else [(w, None) for w in ws]
    norm_w = (1 + 0.1 * torch.randn(k, device=dev)).to(torch.bfloat16)
    d2t = torch.randint(0, 1000, (n,), device=dev)
    wtype = gemv.FP8 if fp8 else torch.bfloat16
    out = []
    for m in rows:
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        res = torch.randn(m, k, device=dev, dtype=torch.bfloat16) * 3
        pro = gemv.Prologue(norm_weight=norm_w, eps=1e-5, residual=res, write_residual=True)

        def rotating(calls: list) -> Callable[[], None]:
            state = {"i": 0}

            def call() -> None:
                calls[state["i"] % len(calls)]()
                state["i"] += 1
            return call

        def one(cfg: gemv_config.GemvConfig | None = None) -> Callable[[], None]:
            return rotating([lambda w=w, s=s: gemv.linear(x, w, None, pro, out_dtype=torch.float32, argmax=True,
                                                          w_scale=s, argmax_map=(d2t, True), config=cfg)
                             for w, s in weights])

        def head(w: torch.Tensor, s: torch.Tensor | None, normed: torch.Tensor) -> torch.Tensor:
            if s is not None:
                return gemv.linear(normed, w, None, out_dtype=torch.float32, w_scale=s)[0]
            return torch.nn.functional.linear(normed, w).float()

        def three_step(w: torch.Tensor, s: torch.Tensor | None) -> torch.Tensor:
            normed, _ = ops.fused_add_rmsnorm(x, res, norm_w, 1e-5)
            return sampling_kernels.argmax_rows(head(w, s, normed), (d2t, True))

        tuned_cfg = None
        if tune:
            tuned_cfg, _ = gemv_config.tune("linear", n, k, gemv_config.m_bucket(m), wtype, dev, one, reps=reps)
        w0, s0 = weights[0]
        picks_one = gemv.linear(x, w0, None, pro, out_dtype=torch.float32, argmax=True, w_scale=s0,
                                argmax_map=(d2t, True))[2]
        agree = bool(torch.equal(picks_one, three_step(w0, s0)))
        fn1, fn3 = one(), rotating([lambda w=w, s=s: three_step(w, s) for w, s in weights])
        fn1(), fn3()
        t1, t3 = gemv_config.graph_seconds(fn1, reps), gemv_config.graph_seconds(fn3, reps)
        row = {"n": n, "k": k, "weight": "fp8" if fp8 else "bf16", "rows": m, "one_launch_us": t1 * 1e6,
               "three_launches_us": t3 * 1e6, "ratio": t1 / t3, "same_picks": agree,
               "tuned": gemv_config.is_tuned("linear", n, k, gemv_config.m_bucket(m), wtype, dev),
               "config": str(gemv_config.lookup("linear", n, k, m, wtype, dev)) if tuned_cfg is None else str(tuned_cfg)}
        print(f"{n}x{k} {row['weight']} rows {m:2d}: one launch {row['one_launch_us']:6.1f} us, three "
              f"{row['three_launches_us']:6.1f} us ({row['ratio']:.2f}x) picks {'equal' if agree else 'DIFFER'} "
              f"tuned={row['tuned']} {row['config']}", flush=True)
        out.append(row)
    return out


def main() -> None:
    args = parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("draft_head_bench: needs a CUDA device")
    rows = [int(r) for r in args.rows.split(",")]
    results = []
    for spec in args.shapes.split(","):
        shape, _, kind = spec.partition(":")
        n, k = (int(v) for v in shape.split("x"))
        results += bench_shape(n, k, kind == "fp8", rows, args.tune, args.reps)
    if args.tune:
        print(gemv_config.cache_path().read_text())
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}
        (args.out / "draft_head_bench.json").write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()

"""Tune the FP8 draft LM head (``gemv.linear(..., w_scale=)``, float32 logits, no prologue) at the
8B EAGLE-3 head's shape (32,000 x 4096) and SmolLM2's (8,192 x 576), buckets 1 and 8, into
$UPDRAFT_CACHE; time each against cuBLAS on the bf16 weight. Prints the cache (entries for
gemv_tuned.json); writes tune_fp8_lm_head.json to $OUT."""
import json
import math
import os

import torch

from updraft.ops import gemv, gemv_config

out = {}
for n, k in ((32000, 4096), (8192, 576)):
    bf = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
          for _ in range(max(1, min(4, math.ceil(100e6 / (n * k * 2)))))]
    q8 = [gemv.quantize_rows_fp8(w) for w in bf]
    for m in (1, 8):
        x = torch.randn(m if m == 1 else 6, k, device="cuda", dtype=torch.bfloat16)

        def run(c: gemv_config.GemvConfig):  # noqa: ANN202
            fns = [lambda q=q, s=s: gemv.linear(x, q, None, out_dtype=torch.float32, w_scale=s, config=c) for q, s in q8]
            state = {"i": 0}

            def call() -> None:
                fns[state["i"] % len(fns)]()
                state["i"] += 1
            return call
        cfg, sec = gemv_config.tune("linear", n, k, gemv_config.m_bucket(x.shape[0]), gemv.FP8, torch.device("cuda"), run)
        turn = {"i": 0}

        def cub() -> None:
            torch.nn.functional.linear(x, bf[turn["i"] % len(bf)]).float()
            turn["i"] += 1
        cub()
        cb = gemv_config.graph_seconds(cub, 24)
        row = {"rows": x.shape[0], "fp8_us": sec * 1e6, "cublas_bf16_us": cb * 1e6, "config": str(cfg),
               "fp8_tbps": n * k / sec / 1e12, "cublas_tbps": 2 * n * k / cb / 1e12}
        out[f"n{n}_k{k}_m{x.shape[0]}"] = row
        print(f"N {n} K {k} rows {x.shape[0]}: FP8 {row['fp8_us']:.1f} us ({row['fp8_tbps']:.2f} TB/s) "
              f"cuBLAS bf16 {row['cublas_bf16_us']:.1f} us ({row['cublas_tbps']:.2f} TB/s) {cfg}", flush=True)
print(open(gemv_config.cache_path()).read())
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "tune_fp8_lm_head.json"), "w"), indent=1)

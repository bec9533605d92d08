"""The draft LM head at SmolLM2's width (K = 576) over draft vocabularies of 8,192 / 16,384 /
32,000 tokens, M = 1 and 8 rows, us per call in CUDA graphs: cuBLAS alone, the chain's present
sequence (RMSNorm add, cuBLAS, float cast, argmax_rows with the d2t map), and the fused small-M
GEMV (norm prologue, float32 logits, argmax epilogue) at its tuned config. Writes
lm_head_bench.json to $OUT."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch  # noqa: E402
from decode_kernels import SMOLLM2, GemmBench, graph_time  # noqa: E402

from updraft.models.layers import RMSNorm  # noqa: E402
from updraft.spec import sampling_kernels  # noqa: E402

out = {}
for n in (8192, 16384, 32000):
    d2t = torch.zeros(n, dtype=torch.long, device="cuda")
    for m in (1, 8):
        b = GemmBench(SMOLLM2, "lm_head", "linear", n, 576, m)
        norm = RMSNorm(576, 1e-5).to("cuda", torch.bfloat16)

        def chain(w: torch.Tensor):  # noqa: ANN202
            def f() -> None:
                h, _ = norm.forward_add(b.x, b.res)
                logits = torch.nn.functional.linear(h, w).float()
                sampling_kernels.argmax_rows(logits, (d2t, True))
            return f
        cfg, sec = b.tune()
        cub = graph_time([b.cublas(w) for w in b.w])
        seq = graph_time([chain(w) for w in b.w])
        row = {"mb": b.bytes / 1e6, "cublas_us": cub * 1e6, "chain_us": seq * 1e6, "fused_us": sec * 1e6,
               "fused_config": str(cfg), "cublas_tbps": b.bytes / cub / 1e12, "fused_tbps": b.bytes / sec / 1e12}
        out[f"n{n}_m{m}"] = row
        print(f"N {n:6d} M {m}: {row['mb']:5.1f} MB  cuBLAS {row['cublas_us']:6.1f} us ({row['cublas_tbps']:.2f} TB/s)  "
              f"chain {row['chain_us']:6.1f} us  fused {row['fused_us']:6.1f} us ({row['fused_tbps']:.2f} TB/s) {cfg}", flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "lm_head_bench.json"), "w"), indent=1)

"""Tune the EAGLE-3 head's QKV GEMM at the 8B shape (N 6144 over K 8192 = [embedding | feature]),
buckets 1 and 8, into $UPDRAFT_CACHE; print each config and its time against cuBLAS."""
import json, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from decode_kernels import LLAMA8B, GemmBench, graph_time
from updraft.ops import gemv_config
out = {}
for m in (1, 6):
    b = GemmBench(LLAMA8B, "qkv", "qkv", 6144, 8192, m)
    cfg, sec = b.tune()
    cub = graph_time([b.cublas(w) for w in b.w])
    out[f"m{m}"] = {"config": cfg.__dict__ if hasattr(cfg, "__dict__") else str(cfg), "fused_us": sec * 1e6, "cublas_us": cub * 1e6,
                    "fused_tbps": b.bytes / sec / 1e12, "cublas_tbps": b.bytes / cub / 1e12}
    print(m, out[f"m{m}"], flush=True)
print(open(gemv_config.cache_path()).read())
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "tune_head_qkv.json"), "w"), indent=1, default=str)

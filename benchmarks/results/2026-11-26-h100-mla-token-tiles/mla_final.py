"""MLA verify, side by side: the new policy (one token a program for small verify batches) and the
old one (token_tile_max_tokens = 0: ndt x heads packed into 32-row tiles); decode beside it."""
import json, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
sys.path.insert(0, os.getcwd())
import torch
import mla_bench as mb
from updraft.attention.mla_backend import MLABackend
args = mb.parse_args(["--profile"])
dev = torch.device("cuda")
dims = (mb.RANK, mb.ROPE)
rows = []
for bs, ctx, stride in ((1, 1024, 1), (1, 1024, 2), (1, 4096, 2), (8, 1024, 2), (8, 8192, 2), (1, 1024, 4), (4, 1024, 4), (8, 8192, 1)):
    for tiles in (16, 0):
        if stride == 1 and tiles == 0:
            continue
        MLABackend.token_tile_max_tokens = tiles
        for r in mb.run_variants([mb.Variant()], bs, ctx, 16, args, dev, dims, stride):
            r["policy"] = "token tiles" if tiles else "packed (old)"
            k = r.pop("kernels_us", {})
            r["kernels"] = k
            rows.append(r)
            print(f"bs {bs} ctx {ctx} ndt {stride} {r['policy']:13s} rows {r['block_rows']} splits {r['kv_splits']} "
                  f"{r['time_us']:.2f} us ({r['fraction_of_peak']:.0%} of copy bw) err {r['rel_err_req0']:.1e}", flush=True)
MLABackend.token_tile_max_tokens = 16
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "mla_final.json"), "w"), indent=1)

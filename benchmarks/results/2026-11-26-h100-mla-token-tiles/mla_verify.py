"""MLA 2-token verify at bs 1 / 8, 1k-4k context, 16 heads: 32-row tiles (policy) vs 16-row tiles
(one token a program), split counts; decode beside it."""
import json, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
sys.path.insert(0, os.getcwd())
import torch
import mla_bench as mb
args = mb.parse_args(["--profile"])
dev = torch.device("cuda")
dims = (mb.RANK, mb.ROPE)
rows = []
for bs, ctx in ((1, 1024), (1, 4096), (8, 1024), (8, 8192)):
    vs = [(1, mb.Variant())]
    vs += [(2, mb.Variant())] + [(2, mb.Variant(16, 64, s, 4, 3)) for s in (None, 8, 16, 32)]
    vs += [(2, mb.Variant(32, 64, s, 8, 3)) for s in (8, 32)]
    for stride, v in vs:
        got = mb.run_variants([v], bs, ctx, 16, args, dev, dims, stride)
        for r in got:
            k = r.pop("kernels_us", {})
            r["kernels"] = k
            rows.append(r)
            print(f"bs {bs} ctx {ctx} stride {stride} {r['variant']:28s} rows {r['block_rows']} splits {r['kv_splits']} "
                  f"{r['time_us']:.2f} us err {r['rel_err_req0']:.1e} | " + ", ".join(f"{n[:40]} {t}" for n, t in k.items()), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "mla_verify.json"), "w"), indent=1)

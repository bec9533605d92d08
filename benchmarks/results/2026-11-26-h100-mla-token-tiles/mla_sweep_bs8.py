"""MLA decode, 16 heads, bs 8 / 8k: every tile x split x warps x stages variant of mla_bench's sweep
(does any reach 70% of the copy bandwidth?)."""
import json, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
sys.path.insert(0, os.getcwd())
import torch
import mla_bench as mb
args = mb.parse_args([])
dev = torch.device("cuda")
dims = (mb.RANK, mb.ROPE)
vs = [mb.Variant()] + [v for v in mb.sweep_variants(16, 1) if v.block_rows == 16]
vs += [mb.Variant(16, 64, s, w, 3) for s in (12, 20, 24) for w in (4, 8)]
rows = mb.run_variants(vs, 8, 8192, 16, args, dev, dims, 1)
rows.sort(key=lambda r: r["time_us"])
for r in rows[:12]:
    print(f"{r['variant']:40s} splits {r['kv_splits']:3d} {r['time_us']:6.2f} us {r['fraction_of_peak']:.1%}", flush=True)
print("policy", [f"{r['time_us']:.2f} {r['fraction_of_peak']:.1%}" for r in rows if r["variant"] == "policy"])
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "mla_sweep_bs8.json"), "w"), indent=1)

# Call 6 (fresh machine; carries .whl): 64-column tensor-core tiles for the 8B shape at 12, 24 and 48 rows
# (every winner of calls 1-3 was the widest tile offered, 32). The GEMMs on the shipped table (16 / 32:
# this change's entries; 64: the heuristic), then a sweep of only the 64-wide candidates; each GEMM
# keeps a 64-wide winner where it beat the shipped config in this call (/tmp/merged); then the 8B steps
# at bs 2, 4 and 8 with the fused layers at every row count, shipped table against merged, alternating.
R=benchmarks/results/2026-12-02-h200-wide-rows
source benchmarks/device/env.sh
mkdir -p /tmp/empty /tmp/c64 /tmp/merged
G="--models llama8b --gemms qkv,o,gate_up,down --m-values 12,24,48 --skip-steps --peak-bw 4.279e12"
UPDRAFT_CACHE=/tmp/empty timeout 100 python benchmarks/decode_kernels.py --out $OUT/gemms_shipped $G 2>&1 | grep llama8b
UPDRAFT_CACHE=/tmp/c64 timeout 300 python benchmarks/decode_kernels.py --out $OUT/gemms_w64 --tune --tune-block-n 64 $G \
    2>&1 | grep llama8b
python - $OUT <<'PY'
import json, sys
out = sys.argv[1]
ship = {(g["gemm"], g["m"]): g for g in json.load(open(f"{out}/gemms_shipped/decode_kernels.json"))["gemms"]}
w64 = {(g["gemm"], g["m"]): g for g in json.load(open(f"{out}/gemms_w64/decode_kernels.json"))["gemms"]}
tuned = json.load(open("/tmp/c64/gemv_configs.json"))
kinds = {"qkv": ("qkv", 128), "o": ("linear", 0), "gate_up": ("gate_up", 0), "down": ("linear", 0)}
merged = {}
for (name, m), g in sorted(w64.items()):
    kind, d = kinds[name]
    bucket = 1 << (m - 1).bit_length()
    key = f"NVIDIA H200|{kind}|n={g['n']}|k={g['k']}|d={d}|m={bucket}|bfloat16"
    s = ship[(name, m)]
    keep = g["fused_us"] < s["fused_us"]
    print(f"{name:>8} m {m}: shipped {s['fused_us']:.2f} us, 64-wide {g['fused_us']:.2f}, cuBLAS {s['cublas_us']:.2f} "
          f"-> {'64-wide' if keep else 'shipped'}")
    if keep:
        merged[key] = tuned[key]
json.dump(merged, open("/tmp/merged/gemv_configs.json", "w"), indent=1)
json.dump(merged, open(f"{out}/merged.json", "w"), indent=1)
PY
for v in shipped merged shipped merged; do
  n=1; [ -f $OUT/steps_${v}_1/decode_kernels.json ] && n=2
  c=/tmp/empty; [ $v = merged ] && c=/tmp/merged
  UPDRAFT_CACHE=$c timeout 100 python benchmarks/decode_kernels.py --out $OUT/steps_${v}_$n --models llama8b --skip-gemms \
      --variants fused_rows64 --batch-sizes 2,4,8 --peak-bw 4.279e12 > $OUT/steps_${v}_$n.log 2>&1
  python - $OUT/steps_${v}_$n/decode_kernels.json $v <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], " ".join(f"{s['mode'][:6]}:bs{s['bs']}={s['ms']:.3f}" for s in d["steps"] if s["model"] == "llama8b"))
PY
done
rm -rf $OUT/steps_*/; true  # the printed lines and the logs come back (too many files otherwise)

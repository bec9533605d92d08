# steps.sh NAME BATCH_SIZES: the 8B decode step and 6-token verify under the "auto" policy (wide rows past
# 8 on cuBLAS) against the fused layers at every row count ("fused_rows64"), with the configs in /tmp/c.
python benchmarks/decode_kernels.py --out $OUT/$1 --models llama8b --skip-gemms --variants fused,fused_rows64 \
    --batch-sizes $2 --peak-bw 4.279e12 > $OUT/$1.log 2>&1
python - $OUT/$1/decode_kernels.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["steps"]:
    print(f"{s['model']:>14} bs {s['bs']} {s['mode'][:8]:>8} {s['variant']:>12} {s['ms']:.3f} ms {s['kernels']} kernels")
PY

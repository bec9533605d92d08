# Device call 1: the keys-on-M MLA decode tile swept against the rows-on-M tile (16 heads), and the
# GPU tests of both tiles at the DeepSeek shapes.
set -u
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton; print(torch.__version__, triton.__version__)"
timeout 420 python benchmarks/mla_bench.py --keys-sweep --heads 16 --repeats 10 \
  --out "$OUT/run1-mla_keys_sweep.json" > "$OUT/run1-mla_keys_sweep.txt" 2>&1
echo "bench rc $?"
python - "$OUT/run1-mla_keys_sweep.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for sec in ("decode", "verify"):
    shapes = {}
    for row in r.get(sec, []):
        shapes.setdefault((row["bs"], row["context"]), []).append(row)
    for (bs, ctx), rows in shapes.items():
        rows.sort(key=lambda x: x["time_us"])
        base = [x for x in rows if x["variant"].strip(" *") in ("rows-on-M", "keys-on-M")]
        print(f"{sec} bs {bs} ctx {ctx}: " + "; ".join(f"{x['variant']} {x['time_us']:.1f}us {x['fraction_of_peak']:.0%}" for x in base))
        for x in rows[:4]:
            print(f"    {x['variant']:<48} splits {x['kv_splits']:>3} {x['time_us']:8.1f} us {x['fraction_of_peak']:.0%} err {x['rel_err_req0']:.1e}")
PY
grep -iE "error|refused|resources" "$OUT/run1-mla_keys_sweep.txt" | head -10
timeout 160 python -m pytest -m gpu -q -p no:cacheprovider tests/attention/test_mla_gpu.py -k "tile_both_ways or deepseek_shapes" \
  > "$OUT/run1-tests.txt" 2>&1
echo "tests rc $?"; tail -5 "$OUT/run1-tests.txt"

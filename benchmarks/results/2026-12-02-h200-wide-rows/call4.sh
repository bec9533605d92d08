# Call 4 (fresh machine; carries .whl and .stage/base = main before the change): the 8B decode step and
# 6-token verify at bs 2, 4, 16 and 32 under the shipped "auto" policy, this change (H200 entries at the
# 16- and 32-row buckets, wide rows fused to 32) against main before it, alternating, empty user cache;
# then SmolLM2's bs-8 S = 5 cycle with the 48-row verify's attention on PDL and/or the in-cycle tune's
# 48-row tiles (../2026-12-02-h200-verify48-tune/).
R=benchmarks/results/2026-12-02-h200-wide-rows
source benchmarks/device/env.sh
mkdir -p /tmp/empty
here=$PWD
for v in new base new base; do
  n=1; [ -f $OUT/steps_${v}_1/decode_kernels.json ] && n=2
  src=$here; [ $v = base ] && src=/tmp/base
  (cd $src && PYTHONPATH=$src UPDRAFT_CACHE=/tmp/empty timeout 150 python benchmarks/decode_kernels.py --out $OUT/steps_${v}_$n \
      --models llama8b --skip-gemms --variants fused --batch-sizes 2,4,16,32 --peak-bw 4.279e12 > $OUT/steps_${v}_$n.log 2>&1)
  python - $OUT/steps_${v}_$n/decode_kernels.json $v <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], " ".join(f"{s['mode'][:6]}:bs{s['bs']}={s['ms']:.3f}/{s['kernels']}" for s in d["steps"] if s["model"] == "llama8b"))
PY
done
Q=benchmarks/results/2026-12-02-h200-verify48-tune
UPDRAFT_CACHE=/tmp/empty timeout 200 python benchmarks/cycle_variants.py --bs 8 --rounds 3 \
    --variants base,verify_pdl,tiles,verify_pdl+tiles --tiles-json $Q/tiles48.json --out $OUT/variants 2>&1 | grep -v Warn | tail -5

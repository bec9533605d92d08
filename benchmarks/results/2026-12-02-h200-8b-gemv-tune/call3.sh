# Call 3 (fresh machine): the 8B steps with (a) the H200 sweep of calls 1-2, (b) the same but the
# one-row bucket given the 6-row bucket's tensor-core configs (the verify ran faster than the
# decode in call 2), (c) as b but gate/up keeps its one-row FMA config, (h) the H100's entries.
R=benchmarks/results/2026-12-02-h200-8b-gemv-tune
source benchmarks/device/env.sh
mkdir -p /tmp/empty
for v in a b c h h c b a; do
  c=/tmp/empty; [ $v != h ] && c=$PWD/.stage/cache/$v
  n=1; [ -f $OUT/steps_${v}_1/decode_kernels.json ] && n=2
  UPDRAFT_CACHE=$c timeout 100 python benchmarks/decode_kernels.py --out $OUT/steps_${v}_$n --models llama8b \
      --skip-gemms --variants fused --batch-sizes 1,8 --peak-bw 4.279e12 > $OUT/steps_${v}_$n.log 2>&1
  python - $OUT/steps_${v}_$n/decode_kernels.json $v <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], " ".join(f"{s['model']}:{s['mode'][:6]}:bs{s['bs']}={s['ms']:.3f}" for s in d["steps"]))
PY
done

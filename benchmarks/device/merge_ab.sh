# usage: bash benchmarks/device/merge_ab.sh [ab|cost]   (carrying .whl and .stage/base: main before the change, env.sh
#        puts it at /tmp/base; random weights, no GGUF)
# A change to the split-KV attention's merge (this checkout) against main before it, in alternating processes; run
# for the merge's partial loads (benchmarks/results/2026-12-06-h100-merge-loads/, an earlier form of this script) and
# with live-splits.patch applied (../2026-12-06-h100-merge-live-splits/).
# ab (~7 min): MLA decode at 16 heads (mla_bench.py --latent; `forward_stored` is issue 15's measure), new / base / new /
# base; the S = 5 cycle and plain step at bs 1 and 8 (cost_pair.sh), new then base; the engine's plain step against the
# bare forward graph (engine_forward_probe.py, this tree); the Triton and MLA attention GPU tests.
# cost (~2.5 min a round): more cost_pair.sh rounds.
source benchmarks/device/env.sh >/dev/null
part=${1:-ab}
if [ "$part" = ab ]; then
  for round in 1 2; do
    for side in new base; do
      dir=$PWD; [ $side = base ] && dir=/tmp/base
      (cd $dir && PYTHONPATH=$dir timeout 120 python benchmarks/mla_bench.py --heads 16 --only decode --latent \
         --out $OUT/mla_${side}_$round.json > /dev/null 2>&1)
      python - $OUT/mla_${side}_$round.json $side <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["decode"]:
    if "unfused" not in r["variant"]:
        print(sys.argv[2], r["bs"], r["context"], r["variant"], f"{r['time_us']:.1f} us {r['fraction_of_peak']:.1%}",
              f"err {r['rel_err_req0']:.1e}")
PY
    done
  done
  bash benchmarks/device/cost_pair.sh live1 --random-smollm
  timeout 100 python benchmarks/engine_forward_probe.py --context 512 --out $OUT/probe-new.json 2>&1 | grep -v Warn \
    | grep -A6 "engine plain step"
  timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/attention/test_triton_gpu.py 2>&1 | tail -2
  timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/attention/test_mla_gpu.py 2>&1 | tail -2
else
  for r in 2 3; do bash benchmarks/device/cost_pair.sh live$r --random-smollm; done
fi

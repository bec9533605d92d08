# usage: bash benchmarks/device/merge_ab.sh [ab|tests]   (carrying .whl and .stage/base: main before the change, env.sh
#        puts it at /tmp/base; random weights, no GGUF)
# The split merge after a decode kernel loading the partials beside their lse (`merge_splits(written=True)`: one round
# trip to L2 where the gated load took two) against main before it, in alternating processes.
# ab (~8 min): MLA decode at 16 heads (mla_bench.py --latent: the policy forward, the model's unfused and latent sides,
# `forward_stored`, issue 15's measure), new / base / new / base; SmolLM2's decode and 6-token verify replays at bs 1
# and 8 (step_pair.py), new / base; the S = 5 cycle and plain step at bs 1 and 8 (cost_pair.sh), new then base.
# tests (~5 min): the Triton and MLA attention GPU tests, then one more cost_pair.sh round.
source benchmarks/device/env.sh >/dev/null
part=${1:-ab}
if [ "$part" = ab ]; then
  for side in new base new base; do
    dir=$PWD; [ $side = base ] && dir=/tmp/base
    (cd $dir && PYTHONPATH=$dir timeout 120 python benchmarks/mla_bench.py --heads 16 --only decode --latent \
       --out $OUT/mla_$side.json > /dev/null 2>&1)
    python - $OUT/mla_$side.json $side <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["decode"]:
    print(sys.argv[2], r["bs"], r["context"], r["variant"], f"{r['time_us']:.1f} us {r['fraction_of_peak']:.1%}")
PY
  done
  for side in new base; do
    dir=$PWD; [ $side = base ] && dir=/tmp/base
    (cd $dir && PYTHONPATH=$dir timeout 90 python benchmarks/step_pair.py --out $OUT/pair-$side --models smollm2 \
       --batch-sizes 1,8 > $OUT/pair-$side.log 2>&1)
    python - $OUT/pair-$side/step_pair.json $side <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(sys.argv[2], r["model"], "bs", r["bs"], r["mode"], f"replay {r['replay_ms']:.4f}",
          f"v/d {r['verify_over_decode']:.3f}" if "verify_over_decode" in r else "")
PY
  done
  bash benchmarks/device/cost_pair.sh merge1 --random-smollm
else
  timeout 200 python -m pytest -q -m gpu -p no:cacheprovider tests/attention/test_triton_gpu.py 2>&1 | tail -3
  timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/attention/test_mla_gpu.py 2>&1 | tail -3
  bash benchmarks/device/cost_pair.sh merge2 --random-smollm
fi

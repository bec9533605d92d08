# usage: bash benchmarks/device/epilogue_ab.sh   (carrying .whl and .stage/base: main before the change, env.sh puts it
#        at /tmp/base; random weights, no GGUF)
# The GEMV epilogues' operands loaded before the K loop (positions, KV slots and bias in the QKV launch; the residual
# tile, norm weight, bias and FP8 scales in `linear`) against main before it, in alternating processes: SmolLM2's
# decode and 6-token verify replays at bs 1 and 8 (step_pair.py, two rounds), the S = 5 cycle and plain step at bs 1
# and 8 (cost_pair.sh), the 8B shape's decode and verify at bs 1 (one round). ~7 min.
source benchmarks/device/env.sh >/dev/null
pair() {  # side round models sizes
  local dir=$PWD; [ $1 = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 90 python benchmarks/step_pair.py --out $OUT/pair-$1-$2-$3 --models $3 --batch-sizes $4 \
     > $OUT/pair-$1-$2-$3.log 2>&1)
  python - $OUT/pair-$1-$2-$3/step_pair.json $1 $2 <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(sys.argv[2], sys.argv[3], r["model"], "bs", r["bs"], r["mode"], f"replay {r['replay_ms']:.4f} busy {r['busy_ms']:.4f}",
          f"v/d {r['verify_over_decode']:.3f}" if "verify_over_decode" in r else "")
PY
}
for r in 1 2; do for side in new base; do pair $side $r smollm2 1,8; done; done
bash benchmarks/device/cost_pair.sh hoist --random-smollm
for side in new base; do pair $side 1 llama8b 1; done

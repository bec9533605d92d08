# Call 5 (same machine, right after call 4): the 8B shape's S = 5 cycle (random EAGLE-3-shaped head, 32k
# draft vocabulary) at bs 1, 2 and 4, this change against main before it, empty user cache.
R=benchmarks/results/2026-12-02-h200-wide-rows
source benchmarks/device/env.sh
mkdir -p /tmp/empty
here=$PWD
for v in new base; do
  src=$here; [ $v = base ] && src=/tmp/base
  (cd $src && PYTHONPATH=$src UPDRAFT_CACHE=/tmp/empty timeout 250 python benchmarks/spec_iteration.py --eight-b \
      --eight-b-sizes 1,2,4 --skip-speed --skip-lossless --out $OUT/cost8b_$v > $OUT/cost8b_$v.log 2>&1)
  python - $OUT/cost8b_$v/*.json $v <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["cost_llama8b_eagle3"]
print(sys.argv[2], " ".join(f"bs{b}: plain {d[f'plain_step_ms_bs{b}']:.3f} cycle {d[f'cycle_ms_greedy_bs{b}']:.3f} "
                            f"({d[f'cycle_steps_greedy_bs{b}']:.3f})" for b in (1, 2, 4)))
PY
done

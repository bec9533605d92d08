# usage: bash benchmarks/device/cost_pair.sh LABEL ARGS... : spec_iteration's plain step and cycle costs at bs 1 and 8,
# new (this checkout) then base (/tmp/base, env.sh), into $OUT/cost_LABEL_{new,base}; prints one line a side
label=$1; shift
for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 150 python benchmarks/spec_iteration.py --skip-speed --skip-lossless --cost-sizes 1,8 \
     "$@" --out $OUT/cost_${label}_$side > $OUT/cost_${label}_$side.log 2>&1)
  python - $OUT/cost_${label}_$side/spec_iteration.json $label $side <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = next(v for k, v in r.items() if k.startswith("cost_"))
keys = [f"{k}_bs{b}" for b in (1, 8) for k in ("plain_step_ms", "cycle_ms_greedy", "cycle_steps_greedy", "cycle_ms_sampled",
                                                "sampled_over_greedy")]
print(sys.argv[2], sys.argv[3], " ".join(f"{k}={c[k]:.4f}" for k in keys if k in c))
PY
done

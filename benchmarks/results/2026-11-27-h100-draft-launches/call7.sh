# the 8B-shape cycle of the committed change (the one-launch head not applied) against f716740,
# twice each, alternating; then the GPU kernel tests
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
for rep in 1 2; do
for v in base new; do
  pp=$PWD; [ $v = base ] && pp=/tmp/base
  PYTHONPATH=$pp python benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless --out /tmp/e8-$v > /tmp/e8-$v.log 2>&1
  cp /tmp/e8-$v/spec_iteration.json $OUT/run7-eightb-$v-$rep.json
  python -c "
import json; c=json.load(open('/tmp/e8-$v/spec_iteration.json'))['cost_llama8b_eagle3']
print('$v', {k: round(v, 4) for k, v in c.items() if isinstance(v, float) and ('cycle_ms' in k or 'cycle_steps' in k or 'plain_step_ms' in k or 'over_greedy' in k)})" || tail -20 /tmp/e8-$v.log
done; done
timeout 200 python -m pytest -q -m gpu tests/ops tests/attention -p no:cacheprovider 2>&1 | tail -4

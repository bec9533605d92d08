# the final code on a fresh machine (no tuning cache: the FP8 configs come from gemv_tuned.json):
# the 8B-shape cycle with the LM head in bf16 and in FP8
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
for v in model auto; do
  python benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless --draft-lm-head $v --out /tmp/e8-$v > /tmp/e8-$v.log 2>&1
  cp /tmp/e8-$v/spec_iteration.json $OUT/eightb-final-$v.json
  python -c "
import json; c=json.load(open('/tmp/e8-$v/spec_iteration.json'))['cost_llama8b_eagle3']
print('$v', {k: round(v, 4) for k, v in c.items() if isinstance(v, float) and ('cycle' in k or 'plain_step_ms' in k or 'over_greedy' in k)})"
done
ls /tmp/c

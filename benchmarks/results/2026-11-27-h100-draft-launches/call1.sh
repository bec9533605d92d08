# tune + time the one-launch draft head; the 8B-shape cycle, this change against f716740
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/a/gguf.part.aa /tmp/c/ &
python benchmarks/draft_head_bench.py --tune --shapes 8192x576 --rows 1,2,4,8,16 --out /tmp/dh1 2>&1 | grep -v Warn
cp /tmp/dh1/draft_head_bench.json $OUT/run1-draft_head_bench-tune.json
python benchmarks/draft_head_bench.py --shapes 32000x4096:fp8 --rows 1,8 --out /tmp/dh2 2>&1 | grep -v Warn
cp /tmp/dh2/draft_head_bench.json $OUT/run1-draft_head_bench-8b.json
cp /tmp/c/gemv_configs.json $OUT/run1-gemv_configs.json
for v in base new; do
  pp=$PWD; [ $v = base ] && pp=/tmp/base
  PYTHONPATH=$pp python benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless --out /tmp/e8-$v > /tmp/e8-$v.log 2>&1
  cp /tmp/e8-$v/spec_iteration.json $OUT/run1-eightb-$v.json
  python -c "
import json; c=json.load(open('/tmp/e8-$v/spec_iteration.json'))['cost_llama8b_eagle3']
print('$v', {k: round(v, 4) for k, v in c.items() if isinstance(v, float) and ('cycle' in k or 'plain_step_ms' in k or 'over_greedy' in k)})" || tail -20 /tmp/e8-$v.log
done
wait; ls -la /tmp/c

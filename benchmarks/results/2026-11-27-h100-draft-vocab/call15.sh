# a fourth machine: tune the FP8 draft LM head, the GPU GEMV tests, then the 8B-shape cycle with the
# EAGLE-3 head's LM head in bf16 (model) and in FP8 (auto picks it for 262 MB), side by side
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
python $R/tune_fp8_lm_head.py 2>&1 | grep -v Warn | tail -30
python -m pytest -q -m gpu tests/ops/test_gemv_gpu.py -p no:cacheprovider 2>&1 | tail -3
for v in model auto; do
  python benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless --draft-lm-head $v --out /tmp/e8-$v > /tmp/e8-$v.log 2>&1
  cp /tmp/e8-$v/spec_iteration.json $OUT/eightb-$v.json
  python -c "
import json; c=json.load(open('/tmp/e8-$v/spec_iteration.json'))['cost_llama8b_eagle3']
print('$v', {k: round(v, 4) for k, v in c.items() if isinstance(v, float) and ('cycle' in k or 'plain_step_ms' in k or 'over_greedy' in k)})"
done

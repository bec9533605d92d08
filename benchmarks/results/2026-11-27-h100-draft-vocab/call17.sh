# join the GGUF; SmolLM2 + the shipped head with its LM head in FP8 against bf16 (model): the
# acceptance on the six sets and the cycle cost
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
cp -r .stage/c/eagle-eval /tmp/c/ && cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab .stage/c/gguf.part.ac > $GGUF && rm /tmp/c/gguf.part.*
for v in model fp8; do
  timeout 140 python benchmarks/eval_acceptance.py --model $GGUF --head builtin:smollm2 --num-steps 5 --out /tmp/ev-$v \
    --draft-lm-head $v --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 5 --accept-batch 16 \
    --max-total-tokens 65536 2>&1 | grep -v Warn | tail -7
  cp /tmp/ev-$v/eval_acceptance.json $OUT/eval-smollm2-lmhead-$v.json
done
for v in model fp8; do
  python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --skip-speed --sizes 1,8 --draft-lm-head $v \
    --out /tmp/cs-$v > /tmp/cs-$v.log 2>&1
  cp /tmp/cs-$v/spec_iteration.json $OUT/cost-smollm2-lmhead-$v.json
  python -c "
import json; c=json.load(open('/tmp/cs-$v/spec_iteration.json'))['cost_smollm2']
print('$v', {k: round(v, 4) for k, v in c.items() if isinstance(v, float) and ('cycle_steps' in k or 'over_greedy' in k)})"
done

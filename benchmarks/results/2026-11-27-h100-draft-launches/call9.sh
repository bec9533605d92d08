# where SmolLM2's 6-token verify spends its time over a decode step (issue 14: verify <= 1.05 decode):
# a clean decode / verify pair, then both steps' kernels by name (random weights, 1k context)
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
python benchmarks/step_pair.py --models smollm2 --batch-sizes 1,8 --out /tmp/sp 2>&1 | grep -v Warn | tail -8
cp /tmp/sp/step_pair.json $OUT/run9-step_pair.json
python benchmarks/decode_kernels.py --models smollm2 --skip-gemms --variants fused --batch-sizes 1 --out /tmp/dk 2>&1 | grep -v Warn | tail -12
cp /tmp/dk/decode_kernels.json $OUT/run9-decode_kernels.json

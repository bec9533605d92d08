# call 1: carry .whl and .stage/a (GGUF part 1). The S = 5 cycle with the lookup assist off / on,
# alternating, random SmolLM2 weights (the kernels do not depend on them); the new kernels' GPU tests.
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
for round in 1 2; do
  for a in 0 3; do
    timeout 150 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless --cost-sizes 1,8 \
      --ngram-assist $a --out $OUT/cost-assist$a-r$round > $OUT/call1-cost-assist$a-r$round.log 2>&1
    cp $OUT/cost-assist$a-r$round/spec_iteration.json $OUT/run1-cost-assist$a-r$round.json; rm -r $OUT/cost-assist$a-r$round
    grep -E '"(plain_step_ms|cycle_ms|cycle_steps)_' $OUT/call1-cost-assist$a-r$round.log | grep -v dense | head -12
  done
done
timeout 150 python -m pytest -q -m gpu tests/spec/test_ngram_device.py tests/spec/test_commit.py 2>&1 | tail -3

# call 11 (the final policy: fused to 64 rows, 40 in a verify block): step pairs at bs 1 / 4 / 8 /
# 32 / 64; the 8B-shape S = 5 cycle; GGUF part 1
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/a/gguf.part.aa /tmp/c/ 2>/dev/null
python benchmarks/step_pair.py --out /tmp/sp11 --models smollm2 --batch-sizes 1,4,8,32,64 2>&1 | grep -v Warn | tail -15
cp /tmp/sp11/step_pair.json $OUT/run11-step_pair.json
python benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless --sizes 1 --out /tmp/si11 2>&1 | grep -v Warn \
  | grep "cycle_steps_greedy\|cycle_ms_greedy\|plain_step_ms\|sampled_over" | head -6
cp /tmp/si11/*.json $OUT/run11-spec_iteration-8b.json

# call 8: the new default policy (narrow activations fused to 64 rows): step pairs at bs 1 / 4 / 8
# / 32 / 64; the GPU tests of the kernels, models and the speculative iteration; GGUF part 1
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/a/gguf.part.aa /tmp/c/ 2>/dev/null
python benchmarks/step_pair.py --out /tmp/sp8 --models smollm2 --batch-sizes 1,4,8,32,64 2>&1 | grep -v Warn | tail -15
cp /tmp/sp8/step_pair.json $OUT/run8-step_pair-default.json
timeout 330 python -m pytest -q -m gpu tests/ops tests/models tests/spec 2>&1 | tail -4

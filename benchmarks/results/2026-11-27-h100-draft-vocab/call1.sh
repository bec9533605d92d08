# stage part 1 of the GGUF; time the 8B-shape cycle with ForwardBatch.logit_rows (a7215f5, never timed)
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
python benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless --out $OUT/run1-eightb.json 2>&1 | tail -25

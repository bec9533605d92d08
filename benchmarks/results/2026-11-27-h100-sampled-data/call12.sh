# call 12 (same machine as call 11; call 11's head merged into updraft/heads/ in the tree): spec / plain
# with the real model, 64 mt_bench prompts x 256 tokens, every batch size
source benchmarks/results/2026-11-27-h100-sampled-data/env.sh >/dev/null; python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive,eagle_s5 --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT 2>&1 | grep -v Warn | tail -40

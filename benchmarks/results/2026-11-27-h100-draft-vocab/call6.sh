# a fresh machine (the first went back while idle): stage part 1; the draft LM head's cost by vocabulary
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
python $R/lm_head_bench.py 2>&1 | grep -v Warn | tail -8

# usage: bash benchmarks/device/context_speed.sh      (after context_eval.sh, same machine, carrying .whl; or on
#        its own: five calls back to back carrying .whl and one of .stage/q1-q5 each, the eval sets in q5's folder
#        (.stage/q5/eagle-eval): the first four stage their part and stop, the fifth joins the GGUF and runs)
# Context tokens on the GPU, part 2: spec / plain with and without them in one process (64 mt_bench prompts x 256
# tokens, adaptive S, lookup assist on: variants plain, eagle_adaptive_nocontext, eagle_adaptive_context at K =
# 256), the S = 5 cycle costs without them (that run's cost part, --context-vocab 0), then the cycle costs with
# K = 256 (a second run, --skip-speed). ~5 min.
source benchmarks/device/env.sh >/dev/null
[ -f "$GGUF" ] || { echo "staged so far: $(ls /tmp/c | tr '\n' ' ')"; exit 0; }
[ -f "$UPDRAFT_EVAL_DIR/mt_bench.jsonl" ] || { echo "no eval sets at $UPDRAFT_EVAL_DIR"; exit 2; }
timeout 330 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive_nocontext,eagle_adaptive_context \
  --context-vocab 0 --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed-off 2>&1 | grep -v Warn | grep -v "^ngram" | tail -12
timeout 200 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --skip-speed --context-vocab 256 \
  --out $OUT/cost-ctx256 2>&1 | grep -v Warn | tail -30

# Calls 6-9 (a second machine, the same session): calls 6-8 staged the GGUF (context_eval.sh carrying .whl and
# .stage/q1-q3); call 9 (.whl, .stage/p5; a first attempt without the eval sets stopped at its prompt file) ran
# context_speed.sh's speed part alone on the batched flush (ContextVocab.flush, the host copy still pageable).
source benchmarks/device/env.sh >/dev/null; [ -f "$GGUF" ] || { echo "no GGUF: $(ls /tmp/c)"; exit 2; }
timeout 380 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive_nocontext,eagle_adaptive_context \
  --context-vocab 0 --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed-flush 2>&1 | grep -v Warn | grep -v "^ngram" | tail -24

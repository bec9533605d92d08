# Call 4 (calls 1-3 stage the GGUF: context_eval.sh carrying .stage/q1-q3; this one carries .whl, .stage/q4 and
# .stage/p5, same machine). Two jobs on the one GPU at once, neither timed: benchmarks/device/context_eval.sh's
# acceptance runs (builtin:smollm2's own drafts, without context tokens and with K = 256 calibrated) in the
# background, and run D's first call (../2026-12-04-h200-anneal-d/call5.sh: seed-31 data generated, teacher-forced,
# training for what is left of ~570 s) in front. Acceptance counts do not depend on timing; the evaluations get
# longer timeouts because they share the GPU.
source benchmarks/device/env.sh >/dev/null
[ -f "$GGUF" ] || { echo "staged so far: $(ls /tmp/c | tr '\n' ' ')"; exit 0; }
( NAME=off HEAD=builtin:smollm2 KINDS=noassist EVAL_TIMEOUT=300 EVAL_ARGS="--context-vocab 0" bash benchmarks/device/head_eval.sh
  NAME=ctx256 HEAD=builtin:smollm2 EVAL_TIMEOUT=240 EVAL_ARGS="--context-vocab 256" bash benchmarks/device/head_eval.sh
) > $OUT/context_eval.txt 2>&1 &
NAME=D SEED=31 VOCAB=8192 STEPS=9000 TB=$(( 560 - SECONDS )) bash benchmarks/results/2026-12-04-h200-v16k-anneal/train.sh
wait
cat $OUT/context_eval.txt

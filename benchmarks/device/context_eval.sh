# usage: bash benchmarks/device/context_eval.sh       (calls before it stage the GGUF: .stage/q1-q4; this one
#                                                       carries .whl, .stage/q5 and the eval sets, .stage/p5)
# Context tokens (SpeculativeConfig.context_vocab) on the GPU, part 1: builtin:smollm2's own drafts on the six
# eval sets (greedy, S = 5, bf16) without them and with K = 256, then with K = 256 and the lookup assist. The
# first evaluation compiles the engine's kernels (EVAL_TIMEOUT 200). ~5 min on a warm machine.
# K = 256 runs with the head's calibration from its config.json (updraft_context_vocab: bias 3.5 since
# 2026-12-05); the CPU measured (1, 0) against it (benchmarks/results/2026-12-05-cpu-context-calibration/).
source benchmarks/device/env.sh >/dev/null
[ -f "$GGUF" ] || { echo "staged so far: $(ls /tmp/c | tr '\n' ' ')"; exit 0; }
[ -f "$UPDRAFT_EVAL_DIR/mt_bench.jsonl" ] || { echo "no eval sets at $UPDRAFT_EVAL_DIR: carry .stage/p5"; exit 2; }
NAME=off HEAD=builtin:smollm2 KINDS=noassist EVAL_TIMEOUT=200 EVAL_ARGS="--context-vocab 0" bash benchmarks/device/head_eval.sh
NAME=ctx256 HEAD=builtin:smollm2 EVAL_ARGS="--context-vocab 256" bash benchmarks/device/head_eval.sh

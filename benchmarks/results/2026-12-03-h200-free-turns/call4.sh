# Call 4 (carries GGUF part 4 + the eval sets; the GGUF joined): a sampled fine-tune of the shipped head on prompt
# set v6 (v5 + half free user turns: the target writes the user's turn itself), the recipe of the three shipped
# fine-tunes (../2026-11-27-h100-sampled-data/call11.sh: 16,000 fresh prompts, T = 0.8, lr 2e-4, 480 s) with a new
# seed, then the six evaluation sets.
R=benchmarks/results/2026-12-03-h200-free-turns
source benchmarks/device/env.sh >/dev/null; ls -la $GGUF /tmp/c/eagle-eval | head -3
RUN=init INIT_FROM=updraft/heads/smollm2-135m-instruct-eagle3 PROMPT_SET=v6 NUM_PROMPTS=16000 TRAIN_BUDGET=450 \
  TRAIN_SECONDS=450 TOTAL_LIMIT=560 EVAL_TIMEOUT=90 EXTRA_TRAIN_ARGS="--seed 11 --lr 2e-4 --warmup-steps 30 --temperature 0.8" \
  OUT=$OUT/v6 bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | tail -14; rm -f $OUT/v6/eval/per_position.png

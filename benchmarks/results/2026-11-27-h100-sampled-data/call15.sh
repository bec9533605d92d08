# call 15 (a fresh machine after calls 13-14 staged GGUF parts a and b; this one carries part c): a
# sampled fine-tune of the shipped head (t08e) on prompt set v4 (a third of the prompts written by
# the target itself) instead of v5: does another prompt distribution move mt_bench more?
source benchmarks/results/2026-11-27-h100-sampled-data/env.sh >/dev/null; RUN=init INIT_FROM=updraft/heads/smollm2-135m-instruct-eagle3 PROMPT_SET=v4 NUM_PROMPTS=16000 TRAIN_BUDGET=480 TRAIN_SECONDS=480 TOTAL_LIMIT=585 EVAL_TIMEOUT=80 EXTRA_TRAIN_ARGS="--seed 5 --lr 2e-4 --warmup-steps 30 --temperature 0.8" OUT=$OUT/v4t08 bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | tail -12; rm -f $OUT/v4t08/eval/per_position.png

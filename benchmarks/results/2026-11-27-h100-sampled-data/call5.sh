# call 5 (carries part c + the eval sets; the GGUF joined): the v5 fine-tune's recipe
# (../2026-11-27-h100-eagle3-v5-finetune/call6.sh) with the responses SAMPLED at T = 0.8 instead of
# greedy; the labels stay the target's distribution at each position, so only the contexts change
source benchmarks/results/2026-11-27-h100-sampled-data/env.sh; ls $GGUF /tmp/c/eagle-eval | head -3; RUN=init INIT_FROM=updraft/heads/smollm2-135m-instruct-eagle3 PROMPT_SET=v5 NUM_PROMPTS=8000 TRAIN_BUDGET=290 TRAIN_SECONDS=290 TOTAL_LIMIT=555 EVAL_TIMEOUT=220 EXTRA_TRAIN_ARGS="--seed 1 --lr 3e-4 --warmup-steps 30 --temperature 0.8" OUT=$OUT/t08 bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | tail -30

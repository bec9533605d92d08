# call 6 (the machine of ../2026-11-27-h100-cycle-kernels/ calls 3-5: the GGUF and the eval sets
# under /tmp/c): a 290 s fine-tune of the shipped head on 8,000 prompts of set v5, then the six
# EAGLE evaluation sets (the v4 fine-tune's recipe with PROMPT_SET=v5)
source benchmarks/results/2026-11-27-h100-cycle-kernels/env.sh; ls $GGUF /tmp/c/eagle-eval | head -3; RUN=init INIT_FROM=updraft/heads/smollm2-135m-instruct-eagle3 PROMPT_SET=v5 NUM_PROMPTS=8000 TRAIN_BUDGET=290 TRAIN_SECONDS=290 TOTAL_LIMIT=555 EVAL_TIMEOUT=220 EXTRA_TRAIN_ARGS="--seed 1 --lr 3e-4 --warmup-steps 30" OUT=$OUT/ft bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | tail -30

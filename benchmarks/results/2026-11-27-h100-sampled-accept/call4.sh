# call 4 (the same machine): GGUF part 3 and the evaluation sets; a 290 s fine-tune of the shipped
# head on 8,000 prompts of set v5 as in ../2026-11-27-h100-eagle3-v5-finetune/ call 6, with each
# sequence's first 128 training positions weighing 3x (--early-weight 3 --early-tokens 128)
source benchmarks/results/2026-11-27-h100-sampled-accept/env.sh
cp .stage/c/gguf.part.ac /tmp/c/; cp -r .stage/c/eagle-eval /tmp/c/
cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab /tmp/c/gguf.part.ac > $GGUF && sha256sum $GGUF | cut -c1-16
RUN=init INIT_FROM=updraft/heads/smollm2-135m-instruct-eagle3 PROMPT_SET=v5 NUM_PROMPTS=8000 TRAIN_BUDGET=290 TRAIN_SECONDS=290 \
  TOTAL_LIMIT=555 EVAL_TIMEOUT=220 EXTRA_TRAIN_ARGS="--seed 1 --lr 3e-4 --warmup-steps 30 --early-weight 3 --early-tokens 128" \
  OUT=$OUT/ft bash scripts/gpu_train_head.sh 2>&1 | grep -v Warn | tail -30

# join the GGUF; the same fine-tune as call 3 with the vocabulary grown to 16,384 tokens (the
# top-k kernel's longest row; half the 32k head's LM-head bytes)
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
cp -r .stage/c/eagle-eval /tmp/c/ && cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab .stage/c/gguf.part.ac > $GGUF
sha256sum $GGUF | cut -c1-16
OUT=$OUT RUN=init INIT_FROM=updraft/heads/smollm2-135m-instruct-eagle3 DRAFT_VOCAB=16384 NUM_PROMPTS=12000 \
  EVAL=0 TRAIN_BUDGET=530 TRAIN_SECONDS=380 \
  EXTRA_TRAIN_ARGS="--resize-draft-vocab --seed 1 --lr 3e-4 --warmup-steps 30" bash scripts/gpu_train_head.sh > /dev/null 2>&1
tail -8 $OUT/run.log; ls -la $OUT/head

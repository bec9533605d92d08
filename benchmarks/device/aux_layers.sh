# usage: bash benchmarks/device/aux_layers.sh      (GGUF joined: after the fourth staging call, same machine)
# Issue 13's last untried lever, the target layers an EAGLE-3 head reads, on a longer schedule than the 500-step
# probe of 2026-12-04 (benchmarks/results/2026-12-04-h200-aux-layers: 1,14,29 against 1,14,26). Heads trained from
# scratch on the same data (PROMPTS v6 prompts, 8,000 by default, answered at T 0.5, seed 20, generated once into
# /tmp/ax-data and reused: the sequences do not depend on the layers; the teacher features are taken per run), the
# same seed (same initial weights and batch order) and the same fixed schedule (STEPS, 900 by default, LR 8e-4,
# warm-up 50, 16,384 tokens a batch, S = 5 unrolled steps), differing only in --aux-layers: EAGLE-3's default for
# 30 layers (1,14,26), a deeper set (8,18,27) and a shallower one (4,12,20). The trainer's held-out estimates (128
# prompts) compare them. 273 s on the H100 with the defaults (benchmarks/results/2026-12-06-h100-aux-layers).
source benchmarks/device/env.sh >/dev/null
STEPS=${STEPS:-900}
for layers in ${LAYER_SETS:-1,14,26 8,18,27 4,12,20}; do
  tag=${layers//,/-}  # the device tool brings back names of letters, digits, '.', '_' and '-'
  timeout --signal=INT ${ARM_LIMIT:-165} python -m updraft.train.cli --target $GGUF --out /tmp/ax-$tag \
    --data-dir /tmp/ax-data --method eagle3 --prompt-set v6 --num-prompts ${PROMPTS:-8000} --held-out 128 \
    --max-new-tokens 320 --gen-batch 512 --gen-max-total-tokens 524288 --batch-tokens 16384 --steps $STEPS \
    --lr 8e-4 --warmup-steps 50 --eval-every $((STEPS / 3)) --log-every 250 --checkpoint-every 0 \
    --final-eval-prompts 0 --draft-vocab-size 8192 --seed 20 --temperature 0.5 --ttt-steps 5 --spec-steps 5 \
    --aux-layers $layers --no-progress > /tmp/ax-$tag.log 2>&1
  echo "layers $layers: exit status $?"
  grep -E "generated|data:|held-out acc|ms/step|stopped" /tmp/ax-$tag.log | grep -v Warn | cut -c1-200
  mkdir -p $OUT/$tag && cp /tmp/ax-$tag.log $OUT/$tag/train-run.log && cp /tmp/ax-$tag/train_log.json $OUT/$tag/
done
true

# Call 4 (carries .stage/q4: the GGUF joins; calls 1-3 carried .stage/q1-q3, the first three of the GGUF xz stream's four parts, running ../2026-12-04-h200-feature-noise/call1.sh):
# two EAGLE-3 heads
# trained from scratch on the same data (5,000 v6 prompts answered at T 0.5, seed 20, generated once and reused
# from the data cache), the same fixed 500-step schedule, differing only in the target layers they read:
# EAGLE-3's default 1,14,26 and 1,14,29 (the last layer, whose output the target's LM head reads, in place of
# layer 26). The trainer's held-out estimates (64 prompts) and engine check (16 held-out prompts) compare them.
source benchmarks/device/env.sh >/dev/null
for layers in 1,14,26 1,14,29; do
  tag=${layers//,/-}  # the device tool brings back names of letters, digits, '.', '_' and '-'
  timeout --signal=INT 170 python -m updraft.train.cli --target $GGUF --out /tmp/ax-$layers --data-dir /tmp/ax-data \
    --method eagle3 --prompt-set v6 --num-prompts 5000 --held-out 64 --max-new-tokens 320 --gen-batch 512 \
    --gen-max-total-tokens 524288 --batch-tokens 16384 --steps 500 --eval-every 250 --log-every 50 --checkpoint-every 0 \
    --final-eval-prompts 16 --final-eval-tokens 192 --draft-vocab-size 8192 --seed 20 --temperature 0.5 \
    --ttt-steps 5 --spec-steps 5 --aux-layers $layers --no-progress > /tmp/ax-$layers.log 2>&1
  echo "layers $layers: exit status $?"
  grep -E "generated|data:|held-out acc|engine on|ms/step|stopped|written" /tmp/ax-$layers.log | grep -v Warn | cut -c1-220
  mkdir -p $OUT/$tag && cp /tmp/ax-$layers.log $OUT/$tag/train-run.log && cp /tmp/ax-$layers/train_log.json $OUT/$tag/
done

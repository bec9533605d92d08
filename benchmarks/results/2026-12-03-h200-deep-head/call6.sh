# Call 6 (same machine, right after call 5): call 4's control head (v6c) against the shipped head with the engine's
# default lookup assist (the six sets, one process each), then spec / plain at bs 1 with v6c (64 mt_bench prompts x 256).
R=benchmarks/results/2026-12-03-h200-deep-head
source benchmarks/device/env.sh >/dev/null
for h in shipped:updraft/heads/smollm2-135m-instruct-eagle3 ctl:/tmp/ctl; do
  timeout 60 python benchmarks/eval_acceptance.py --model $GGUF --head ${h#*:} --num-steps 5 \
    --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
    --out $OUT/assist-${h%%:*} > $OUT/assist-${h%%:*}.log 2>&1
  grep "^mean accept" $OUT/assist-${h%%:*}.log | sed "s/^/${h%%:*} assist: /"; rm -f $OUT/assist-${h%%:*}/per_position.png
done
timeout 230 python benchmarks/spec_iteration.py --smollm $GGUF --head /tmp/ctl --skip-lossless --variants plain,eagle_adaptive \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed 2>&1 | grep -v Warn | tail -12

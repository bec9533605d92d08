# Call 5 (same machine, right after call 4): run B with the lookup assist, then spec / plain with the better head
# (HEAD, chosen from calls 3-4; 64 mt_bench prompts x 256 tokens, adaptive S, the lookup assist on; n-gram on sum).
R=benchmarks/results/2026-12-03-h200-double-data
source benchmarks/device/env.sh >/dev/null
ev() { timeout 60 python benchmarks/eval_acceptance.py --model $GGUF --head $2 --num-steps 5 $3 \
  --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
  --out $OUT/$1 > /tmp/$1.log 2>&1; grep "^mean accept" /tmp/$1.log | sed "s/^/$1: /"; rm -f $OUT/$1/per_position.png; }
ev assist-b /tmp/b-head ""
HEAD=${HEAD:-/tmp/b-head}   # ran as HEAD=/tmp/a-head: run B measured below run A from its own drafts
timeout 300 python benchmarks/spec_iteration.py --smollm $GGUF --head $HEAD --skip-lossless --variants plain,eagle_adaptive \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed 2>&1 | grep -v Warn | tail -14

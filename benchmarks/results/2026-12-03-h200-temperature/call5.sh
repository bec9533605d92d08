# Call 5 (a fresh machine again, after p1-p3 were carried once more): run F's head (carried in .stage/p4/f-head
# with the eval sets) on the six sets, own drafts then the lookup assist, then spec / plain.
source benchmarks/device/env.sh >/dev/null; H=.stage/p4/f-head
for kind in noassist assist; do flag=""; [ $kind = noassist ] && flag="--ngram-assist 0"
  timeout 70 python benchmarks/eval_acceptance.py --model $GGUF --head $H --num-steps 5 $flag --limit mt_bench=80,default=20 \
    --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 --out $OUT/$kind-f > /tmp/$kind-f.log 2>&1
  echo rc $?; rm -f $OUT/$kind-f/per_position.png; grep "^mean accept" /tmp/$kind-f.log
  grep -E "^(mt_bench|humaneval|gsm8k|alpaca|sum|qa)" /tmp/$kind-f.log; done
timeout 170 python benchmarks/spec_iteration.py --smollm $GGUF --head $H --skip-lossless --variants plain,eagle_adaptive \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed 2>&1 | grep -v Warn | tail -14

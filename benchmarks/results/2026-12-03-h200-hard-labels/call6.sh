# Call 6 (same machine as call 5b; the 0.5 head carried back in .stage/heads): in one process
# each, the shipped head's own drafts, then the shipped, control, 0.5 and 1.0 heads with the default lookup assist.
R=benchmarks/results/2026-12-03-h200-hard-labels
source benchmarks/device/env.sh >/dev/null
ev() { timeout 60 python benchmarks/eval_acceptance.py --model $GGUF --head $2 --num-steps 5 $3 \
  --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
  --out $OUT/$1 > $OUT/$1.log 2>&1; grep "^mean accept" $OUT/$1.log | sed "s/^/$1: /"; rm -f $OUT/$1/per_position.png; }
ev noassist-shipped updraft/heads/smollm2-135m-instruct-eagle3 "--ngram-assist 0"
ev assist-shipped updraft/heads/smollm2-135m-instruct-eagle3 ""

ev assist-h05 .stage/heads/h05 ""
ev assist-h10 /tmp/h10-head ""

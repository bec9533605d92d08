# NOT RUN (three refused starts; 264 s of budget left). Calls 7-11 (a fresh machine): 7-9 carry GGUF parts 1-3 (nothing runs), 10 part 4 and the eval sets, 11 the shipped
# head before this change (v6b, in an ignored .stage/old): own drafts (no lookup assist) of v6b and of v6c (call 4's
# head, now shipped), one process each, side by side in one run; v6c twice, to see whether a repeat moves.
R=benchmarks/results/2026-12-03-h200-deep-head
source benchmarks/device/env.sh >/dev/null
if [ -f $GGUF ] && [ -d .stage/old ]; then
  for h in v6b:.stage/old v6c:updraft/heads/smollm2-135m-instruct-eagle3 v6c-again:updraft/heads/smollm2-135m-instruct-eagle3; do
    timeout 60 python benchmarks/eval_acceptance.py --model $GGUF --head ${h#*:} --num-steps 5 --ngram-assist 0 \
      --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
      --out $OUT/noassist-${h%%:*} > $OUT/noassist-${h%%:*}.log 2>&1
    grep "^mean accept" $OUT/noassist-${h%%:*}.log | sed "s/^/${h%%:*} own drafts: /"; rm -f $OUT/noassist-${h%%:*}/per_position.png
  done
else
  ls /tmp/c
fi

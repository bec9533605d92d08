# call 11: carry .stage/c, the GGUF joined. Acceptance at T 0.7 top-p 0.9 (lossless rejection
# sampling), S = 5 pinned, the assist on (3) and off (0), every set.
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
for a in 3 0; do
  timeout 250 python benchmarks/eval_acceptance.py --model $GGUF --ngram-assist $a --temperature 0.7 --top-p 0.9 \
    --speed-prompts 5 --out $OUT/eval-t07-assist$a > $OUT/call11-eval-t07-assist$a.log 2>&1
  grep -E "^mean accept|bs1" $OUT/call11-eval-t07-assist$a.log | sed 's/per position.*bs1/bs1/'
  cp $OUT/eval-t07-assist$a/eval_acceptance.json $OUT/run11-eval-t07-assist$a.json; rm -r $OUT/eval-t07-assist$a
done

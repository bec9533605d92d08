# call 3: carry .whl and .stage/c (GGUF part 3, the eval sets): the GGUF joined. Acceptance of the
# shipped head with the lookup assist (default, 3) and without (0), greedy S = 5, every set.
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
for a in 3 0; do
  timeout 280 python benchmarks/eval_acceptance.py --model $GGUF --ngram-assist $a --speed-prompts 5 --out $OUT/eval-assist$a \
    > $OUT/call3-eval-assist$a.log 2>&1; tail -12 $OUT/call3-eval-assist$a.log
  cp $OUT/eval-assist$a/eval_acceptance.json $OUT/run3-eval-assist$a.json; rm -r $OUT/eval-assist$a
done

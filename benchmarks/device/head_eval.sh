# usage: NAME=g HEAD=/tmp/g-head bash benchmarks/device/head_eval.sh
# A draft head's own drafts (--ngram-assist 0) and the default lookup assist on the six eval sets (greedy, S = 5,
# 80 mt_bench prompts and 20 of each other set, 256 tokens): $OUT/{noassist,assist}-$NAME/eval_acceptance.json and
# the mean accept lengths printed. Needs GGUF and the eval sets (benchmarks/device/env.sh, sourced first). The first
# evaluation on a fresh machine compiles its Triton kernels first (>70 s in all); each gets EVAL_TIMEOUT (120 s).
# KINDS=noassist runs the own-draft evaluation alone. EVAL_ARGS: more eval_acceptance.py flags (e.g. --context-vocab 256).
: "${NAME:?}" "${HEAD:?}" "${GGUF:?exported by benchmarks/device/env.sh}"
for kind in ${KINDS:-noassist assist}; do
  flag=""; [ $kind = noassist ] && flag="--ngram-assist 0"
  timeout ${EVAL_TIMEOUT:-120} python benchmarks/eval_acceptance.py --model $GGUF --head $HEAD --num-steps 5 $flag \
    --limit ${LIMIT:-mt_bench=80,default=20} --max-tokens ${EVAL_TOKENS:-256} --speed-prompts 0 --accept-batch 16 --max-total-tokens 65536 \
    ${EVAL_ARGS:-} --out $OUT/$kind-$NAME > /tmp/$kind-$NAME.log 2>&1; rc=$?
  rm -f $OUT/$kind-$NAME/per_position.png
  if grep -q "^mean accept" /tmp/$kind-$NAME.log; then grep "^mean accept" /tmp/$kind-$NAME.log | sed "s/^/$kind-$NAME: /"
  else echo "$kind-$NAME: exit status $rc (124: past EVAL_TIMEOUT)"; tail -3 /tmp/$kind-$NAME.log; fi
done
for kind in ${KINDS:-noassist assist}; do grep -E "^(mt_bench|humaneval|gsm8k|alpaca|sum|qa) " /tmp/$kind-$NAME.log | sed "s/^/$kind: /"; done

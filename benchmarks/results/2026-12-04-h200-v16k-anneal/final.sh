# Run N's last call (the machine of its last training call, at once): the head /tmp/N-head (train.sh leaves each
# call's head there) on the six eval sets, its own drafts and with the lookup assist (benchmarks/device/head_eval.sh),
# then spec / plain (64 mt_bench prompts x 256 tokens, adaptive S, the lookup assist on) with it and with the shipped
# head (run M at step 42,980, 8,192 tokens) in turn: the larger vocabulary's LM head costs every draft step more.
source benchmarks/device/env.sh >/dev/null
# (its first run, call 6a, carried no eval sets and spent 75 s failing in each script: carry .stage/p5/eagle-eval)
[ -f $UPDRAFT_EVAL_DIR/mt_bench.jsonl ] || { echo "no eval sets at $UPDRAFT_EVAL_DIR: carry a .stage/*/eagle-eval"; exit 2; }
# NAME=C: the control's head (/tmp/C-head) instead. HEAD is set before NAME: bash assigns a command's prefix words in
# order, and run C's last call (HEAD after NAME) evaluated /tmp/C17227-head, which does not exist
NAME=${NAME:-N}
step=$(python -c "import json; print(json.load(open('/tmp/$NAME-head/train_state.json'))['state']['step'])")
HEAD=/tmp/$NAME-head NAME=$NAME$step bash benchmarks/device/head_eval.sh
for h in $NAME:/tmp/$NAME-head shipped:builtin:smollm2; do
  timeout 200 python benchmarks/spec_iteration.py --smollm $GGUF --head ${h#*:} --skip-lossless --variants plain,eagle_adaptive \
    --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed-${h%%:*} 2>&1 | grep -v Warn | grep -v "^ngram" | tail -12
done

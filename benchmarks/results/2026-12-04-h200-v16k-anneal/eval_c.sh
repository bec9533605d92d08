# The next device session's first call after staging (calls 1-3 carry .whl and .stage/q1-q3; this one .whl,
# .stage/q4 and .stage/p5 = the eval sets): `bash benchmarks/results/2026-12-04-h200-v16k-anneal/eval_c.sh`.
# The shipped head C-17227 (builtin:smollm2) on the six eval sets, its own drafts and with the lookup assist
# (benchmarks/device/head_eval.sh, ~110 s on a warm machine): the H200 evaluation run C's last call never ran.
# With M-42980 carried too (a folder .stage/<any>/M-head: `git show 80f2445:...` of its model.safetensors and
# config.json, in a staging call of its own), spec / plain with the two heads in the order C M M C, so that an
# order effect shows (run C's call 7 ran C then M once each: C's iterations read 1.9% longer, its cycle not).
source benchmarks/device/env.sh >/dev/null
# a carried M-head is kept in /tmp (a later call's tree may not hold it)
for d in .stage/*/M-head; do [ -d "$d" ] && rm -rf /tmp/M-head && cp -r "$d" /tmp/M-head; done
[ -f "$GGUF" ] || { echo "staged so far: $(ls /tmp/c | tr '\n' ' ')"; exit 0; }
[ -f "$UPDRAFT_EVAL_DIR/mt_bench.jsonl" ] || { echo "no eval sets at $UPDRAFT_EVAL_DIR: carry .stage/p5"; exit 2; }
NAME=C17227 HEAD=builtin:smollm2 bash benchmarks/device/head_eval.sh
M=/tmp/M-head
[ -f $M/config.json ] || { echo "no M-head carried: speed skipped"; exit 0; }
for h in C1:builtin:smollm2 M1:$M M2:$M C2:builtin:smollm2; do
  timeout 200 python benchmarks/spec_iteration.py --smollm $GGUF --head ${h#*:} --skip-lossless --variants plain,eagle_adaptive \
    --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed-${h%%:*} 2>&1 | grep -v Warn | grep -v "^ngram" | tail -8
done

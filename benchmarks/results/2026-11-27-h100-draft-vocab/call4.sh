# the evaluation: the shipped head, the new 32k head, and the new head cut to 8,192 (the shipped
# tokens) and 16,384 tokens; same machine as call 3 (its head and data in /tmp/updraft-gpu-head)
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
W=/tmp/updraft-gpu-head
python $R/truncate.py $W/head updraft/heads/smollm2-135m-instruct-eagle3 $W/data $GGUF /tmp/cut 2>&1 | tail -4
for h in shipped:updraft/heads/smollm2-135m-instruct-eagle3 v32k:$W/head v8k:/tmp/cut-8192 v16k:/tmp/cut-16384; do
  name=${h%%:*}; dir=${h#*:}
  timeout 140 python benchmarks/eval_acceptance.py --model $GGUF --head $dir --num-steps 5 --out /tmp/ev-$name \
    --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 5 --accept-batch 16 --max-total-tokens 65536 2>&1 \
    | grep -v Warn | tail -7
  cp /tmp/ev-$name/eval_acceptance.json $OUT/eval-$name.json
done

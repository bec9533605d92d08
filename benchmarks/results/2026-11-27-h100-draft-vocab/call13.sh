# the 16k head against the shipped one: acceptance on the six sets, cycle cost (greedy / sampled,
# bs 1 / 8) and the bs-1 cycle profile
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
H16=/tmp/updraft-gpu-head/head
mkdir -p $H16 && cp .stage/h16k/* $H16/ && ls $H16
for h in shipped:updraft/heads/smollm2-135m-instruct-eagle3 v16k:$H16; do
  name=${h%%:*}; dir=${h#*:}
  timeout 140 python benchmarks/eval_acceptance.py --model $GGUF --head $dir --num-steps 5 --out /tmp/ev-$name \
    --limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 5 --accept-batch 16 --max-total-tokens 65536 2>&1 \
    | grep -v Warn | tail -7
  cp /tmp/ev-$name/eval_acceptance.json $OUT/eval2-$name.json
  cp /tmp/ev-$name/per_position.png $OUT/per_position-$name.png 2>/dev/null
done
for h in shipped:updraft/heads/smollm2-135m-instruct-eagle3 v16k:$H16; do
  name=${h%%:*}; dir=${h#*:}
  python benchmarks/spec_iteration.py --smollm $GGUF --head $dir --skip-lossless --skip-speed --sizes 1,8 \
    --out /tmp/cost-$name > /tmp/cost-$name.log 2>&1
  cp /tmp/cost-$name/spec_iteration.json $OUT/cost-$name.json
  python - $name <<'PY'
import json, sys
d = json.load(open(f"/tmp/cost-{sys.argv[1]}/spec_iteration.json"))
c = d.get("cost_smollm2") or d
print(sys.argv[1], {k: round(v, 4) for k, v in c.items() if isinstance(v, float) and ("cycle_steps" in k or "over_greedy" in k or k.startswith("plain_step_ms") or k.startswith("cycle_ms"))})
PY
done
python benchmarks/cycle_profile.py --smollm $GGUF --head $H16 --sizes 1 --iters 10 --out /tmp/prof-v16k > /tmp/prof-v16k.log 2>&1
cp /tmp/prof-v16k/cycle_profile.json $OUT/profile-v16k.json; tail -30 /tmp/prof-v16k.log

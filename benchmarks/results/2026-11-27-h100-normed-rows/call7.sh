# call 7 (same machine as 6, GGUF in place): the cycle cost again in the other order (after, then
# before); step pairs at 48 / 60 verify rows and 48 / 64 decode rows, fused up to 64 rows against
# the default
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
ls -la $GGUF | cut -c1-60
si() {  # label, root, extra env
  local label=$1 root=$2; shift 2
  env PYTHONPATH=$root "$@" python $root/benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --skip-speed \
    --sizes 1,8 --out /tmp/si7-$label 2>&1 | grep -v Warn | grep "cycle_steps_greedy\|plain_step_ms\|cycle_ms_greedy" | head -8
  cp /tmp/si7-$label/*.json $OUT/run7-spec_iteration-$label.json
}
si new $PWD
si base /tmp/base2
si new-again $PWD
si base-again /tmp/base2
for v in default rows64; do
  e=""; [ $v = rows64 ] && e="UPDRAFT_FUSED_MAX_ROWS=64"
  env $e python benchmarks/step_pair.py --out /tmp/sp7-$v --models smollm2 --batch-sizes 8,10,48,64 2>&1 | grep -v Warn | tail -12
  cp /tmp/sp7-$v/step_pair.json $OUT/run7-step_pair-$v.json
done

# call 6: GGUF part 3 and the join; SmolLM2 + builtin:smollm2 S = 5 cycle cost at bs 1 / 4 / 8
# before (d04b45b) and after, and after with the fused layers up to 32 rows; step pairs at 30 / 36
# verify rows and 32 decode rows, fused up to 64 rows against the default
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/c/gguf.part.ac /tmp/c/ && cp -r .stage/c/eagle-eval /tmp/c/ 2>/dev/null
cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab /tmp/c/gguf.part.ac > $GGUF && sha256sum $GGUF | cut -c1-16
rm -rf /tmp/base2 && mkdir -p /tmp/base2 && tar xzf .stage/base/base.tar.gz -C /tmp/base2 && ln -s $PWD/updraft/heads /tmp/base2/updraft/heads
si() {  # label, root, extra env
  local label=$1 root=$2; shift 2
  env PYTHONPATH=$root "$@" python $root/benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --skip-speed \
    --sizes 1,4,8 --out /tmp/si6-$label 2>&1 | grep -v Warn | grep "cycle_steps_\|plain_step_ms\|cycle_ms_greedy" | head -12
  cp /tmp/si6-$label/*.json $OUT/run6-spec_iteration-$label.json
}
si base /tmp/base2
si new $PWD
si new-rows32 $PWD UPDRAFT_FUSED_MAX_ROWS=32
for v in default rows64; do
  e=""; [ $v = rows64 ] && e="UPDRAFT_FUSED_MAX_ROWS=64"
  env $e python benchmarks/step_pair.py --out /tmp/sp6-$v --models smollm2 --batch-sizes 5,6,32 2>&1 | grep -v Warn | tail -9
  cp /tmp/sp6-$v/step_pair.json $OUT/run6-step_pair-$v.json
done

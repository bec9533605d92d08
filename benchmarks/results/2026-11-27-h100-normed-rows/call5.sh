# call 5: tune the one-row bucket too; step pairs with the configs tuned in calls 4-5 against
# the shipped ones, and with the fused layers up to 64 rows (bs-4 / bs-8 verify = 24 / 48 rows);
# GGUF part 2 staged
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/b/gguf.part.ab /tmp/c/ 2>/dev/null
timeout 300 python benchmarks/decode_kernels.py --models smollm2 --tune --gemms qkv,o,gate_up,down --m-values 1 \
  --skip-steps --out /tmp/dk5 2>&1 | grep -v Warn | tail -5
cp /tmp/dk5/decode_kernels.json $OUT/run5-decode_kernels-tuned-gemms-m1.json; cp /tmp/c/gemv_configs.json $OUT/run5-gemv_configs.json
sp() {  # label, extra env
  local label=$1; shift
  env "$@" python benchmarks/step_pair.py --out /tmp/sp5-$label --models smollm2 --batch-sizes 1,4,8 2>&1 | grep -v Warn | tail -9
  cp /tmp/sp5-$label/step_pair.json $OUT/run5-step_pair-$label.json
}
sp tuned
sp tuned-rows64 UPDRAFT_FUSED_MAX_ROWS=64
sp shipped UPDRAFT_CACHE=/tmp/empty-cache
sp tuned-again

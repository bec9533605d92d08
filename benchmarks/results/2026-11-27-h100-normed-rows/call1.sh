# call 1: the decode / 6-token verify step pair before (d04b45b, /tmp/base) and after, SmolLM2 at
# bs 1 / 8 (and the bs-8 verify on the fused layers, 48 rows) and the 8B shape at bs 1; SmolLM2's
# GEMMs as the layer now launches them; the GPU kernel tests; GGUF part 1 staged
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
R=benchmarks/results/2026-11-27-h100-normed-rows
cp .stage/a/gguf.part.aa /tmp/c/ 2>/dev/null
sp() {  # label, PYTHONPATH, extra env, args
  local label=$1 pp=$2; shift 2
  env PYTHONPATH=$pp "$@" python benchmarks/step_pair.py --out /tmp/sp-$label ${SP_ARGS} 2>&1 | grep -v Warn | tail -6
  cp /tmp/sp-$label/step_pair.json $OUT/run1-step_pair-$label.json
}
SP_ARGS="--models smollm2 --batch-sizes 1,8"
sp base-smollm2 /tmp/base
sp new-smollm2 $PWD
sp new-smollm2-rows64 $PWD UPDRAFT_FUSED_MAX_ROWS=64
sp base-smollm2-again /tmp/base
SP_ARGS="--models llama8b --batch-sizes 1"
sp base-8b /tmp/base
sp new-8b $PWD
python benchmarks/decode_kernels.py --models smollm2 --skip-steps --m-values 1,6,48 --out /tmp/dk 2>&1 | grep -v Warn | tail -16
cp /tmp/dk/decode_kernels.json $OUT/run1-decode_kernels-gemms.json
timeout 200 python -m pytest -q -m gpu tests/ops 2>&1 | tail -4

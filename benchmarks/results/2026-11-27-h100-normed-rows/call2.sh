# call 2: the same pairs with the base's own benchmark scripts (d04b45b's updraft/ and
# benchmarks/{step_pair,decode_kernels}.py under /tmp/base2), SmolLM2 and the 8B shape; the 8B
# shape's GEMMs before and after (bs 1 and 6 rows); GGUF part 2 staged
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/b/gguf.part.ab /tmp/c/ 2>/dev/null
rm -rf /tmp/base2 && mkdir -p /tmp/base2 && tar xzf .stage/base/base.tar.gz -C /tmp/base2 && ln -s $PWD/updraft/heads /tmp/base2/updraft/heads
sp() {  # label, root (its updraft/ and benchmarks/), extra env
  local label=$1 root=$2; shift 2
  env PYTHONPATH=$root "$@" python $root/benchmarks/step_pair.py --out /tmp/sp2-$label ${SP_ARGS} 2>&1 | grep -v Warn | tail -6
  cp /tmp/sp2-$label/step_pair.json $OUT/run2-step_pair-$label.json
}
SP_ARGS="--models smollm2,llama8b --batch-sizes 1"
sp base /tmp/base2
sp new $PWD
sp base-again /tmp/base2
sp new-again $PWD
for v in base new; do
  root=$PWD; [ $v = base ] && root=/tmp/base2
  PYTHONPATH=$root python $root/benchmarks/decode_kernels.py --models llama8b --skip-steps --m-values 1,6 \
    --gemms qkv,o,gate_up,down --out /tmp/dk2-$v 2>&1 | grep -v Warn | tail -9
  cp /tmp/dk2-$v/decode_kernels.json $OUT/run2-decode_kernels-8b-gemms-$v.json
done

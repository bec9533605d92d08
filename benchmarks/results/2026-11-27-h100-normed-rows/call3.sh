# call 3: the partial sums now loaded before the K loop and reduced after it (run 1-2's consumers
# read them in a loop before the weight stream: bs-1 decode slower). Step pairs before / after,
# SmolLM2 and the 8B shape at bs 1 and 8; the 8B-shape S = 5 cycle before / after; GGUF part 1
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/a/gguf.part.aa /tmp/c/ 2>/dev/null
rm -rf /tmp/base2 && mkdir -p /tmp/base2 && tar xzf .stage/base/base.tar.gz -C /tmp/base2 && ln -s $PWD/updraft/heads /tmp/base2/updraft/heads
sp() {  # label, root (its updraft/ and benchmarks/), extra env
  local label=$1 root=$2; shift 2
  env PYTHONPATH=$root "$@" python $root/benchmarks/step_pair.py --out /tmp/sp3-$label ${SP_ARGS} 2>&1 | grep -v Warn | tail -9
  cp /tmp/sp3-$label/step_pair.json $OUT/run3-step_pair-$label.json
}
SP_ARGS="--models smollm2,llama8b --batch-sizes 1,8"
sp base /tmp/base2
sp new $PWD
sp base-again /tmp/base2
sp new-again $PWD
for v in base new; do
  root=$PWD; [ $v = base ] && root=/tmp/base2
  PYTHONPATH=$root python $root/benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless --sizes 1 \
    --out /tmp/si3-$v 2>&1 | grep -v Warn | grep -i "cycle\|step\|bs" | head -12
  cp /tmp/si3-$v/*.json $OUT/run3-spec_iteration-8b-$v.json
done

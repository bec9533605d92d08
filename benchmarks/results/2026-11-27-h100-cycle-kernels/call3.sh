# call 3: GGUF part 1 (of 3: with the repository's 29 MB two halves do not fit a call); the S = 5
# cycle, base (27d0f87) against e66cc60 (+ the sampled draft steps' logits in bf16 too), random
# SmolLM2 shape, alternating; GPU tests of spec, models and ops
source benchmarks/results/2026-11-27-h100-cycle-kernels/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
mkdir -p /tmp/base2 && tar xzf .stage/base/base.tar.gz -C /tmp/base2 && ln -sfn $PWD/updraft/heads /tmp/base2/updraft/heads
for i in 1 2; do
  for v in base new; do
    if [ $v = base ]; then P=/tmp/base2; else P=$PWD; fi
    PYTHONPATH=$P timeout 120 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --sizes 1,8 --out /tmp/si-$v-$i 2>&1 | grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_|sampled_over)' | tr -d '\n'; echo " <- $v $i"
    cp /tmp/si-$v-$i/spec_iteration.json $OUT/run3-spec_iteration-$v-$i.json
  done
done
timeout 240 python -m pytest -q -m gpu tests/spec tests/models tests/ops 2>&1 | tail -3

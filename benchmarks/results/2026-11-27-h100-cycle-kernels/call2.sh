# call 2: GGUF part 2; S = 5 cycle cost, base (HEAD 27d0f87 from a git archive) against this
# change (greedy logits in bf16, one read_rows launch), random SmolLM2 shape + builtin:smollm2,
# alternating; GPU tests of the touched code
source benchmarks/results/2026-11-27-h100-cycle-kernels/env.sh
cp .stage/b/gguf.part.ab /tmp/c/
mkdir -p /tmp/base2 && tar xzf .stage/base/base.tar.gz -C /tmp/base2 && ln -sfn $PWD/updraft/heads /tmp/base2/updraft/heads
for i in 1 2; do
  for v in base new; do
    if [ $v = base ]; then P=/tmp/base2; else P=$PWD; fi
    PYTHONPATH=$P timeout 120 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
      --sizes 1,8 --out /tmp/si-$v-$i 2>&1 | grep -E '"(decode_ms|plain_step_ms|cycle_ms|sampled_over)' | tr -d '\n'; echo " <- $v $i"
    cp /tmp/si-$v-$i/spec_iteration.json $OUT/run2-spec_iteration-$v-$i.json
  done
done
timeout 200 python -m pytest -q -m gpu tests/spec tests/runtime -x 2>&1 | tail -3

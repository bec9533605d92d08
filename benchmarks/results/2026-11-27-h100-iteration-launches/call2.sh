# call 2 (the same machine): stage GGUF part b; the attention kit on CUDA (triton and mla: their
# metadata is now the batch's own tensors); the
# 8B shape's cycle base / new; one-row GEMV configs as dots, in the step (SmolLM2, bs 1 and 8)
source benchmarks/results/2026-11-27-h100-iteration-launches/env.sh
cp .stage/b/gguf.part.ab /tmp/c/
timeout 300 python -m updraft.cli kit run --device cuda --no-progress --json $OUT/call2-kit.json \
  --out $OUT/attention-matrix-h100.md > $OUT/call2-kit.log 2>&1; tail -2 $OUT/call2-kit.log
for i in 1; do
  for v in base new; do
    if [ $v = base ]; then P=/tmp/base; else P=$PWD; fi
    PYTHONPATH=$P timeout 150 python $P/benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless \
      --out /tmp/e8-$v-$i > /tmp/e8-$v-$i.log 2>&1
    grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs|cycle_steps_greedy)' /tmp/e8-$v-$i/spec_iteration.json | tr -d '\n '; echo " <- 8B $v $i"
    cp /tmp/e8-$v-$i/spec_iteration.json $OUT/run2-eightb-$v-$i.json
  done
done
python benchmarks/results/2026-11-27-h100-iteration-launches/gemv_variants.py /tmp/cv
for v in default gate_up all; do
  mkdir -p /tmp/cv/$v
  UPDRAFT_CACHE=/tmp/cv/$v timeout 120 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
    --sizes 1,8 --out /tmp/gv-$v > /tmp/gv-$v.log 2>&1
  grep -E '"(plain_step_ms|cycle_ms_greedy_bs)' /tmp/gv-$v/spec_iteration.json | tr -d '\n '; echo " <- gemv m1 $v"
  cp /tmp/gv-$v/spec_iteration.json $OUT/run2-gemv-m1-$v.json
done

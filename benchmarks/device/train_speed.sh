# usage: bash benchmarks/device/train_speed.sh   (no GGUF needed: it can ride on a GGUF-staging call)
# The draft head's optimizer step at SmolLM2-135M's shape (benchmarks/train_step.py, random weights, synthetic
# data; the shipped recipe's EAGLE-3 head, 5 unrolled steps), each at 16,384 and 32,768 padded tokens a batch in
# one process (a compiled forward compiles once, with dynamic shapes), a profile of 2 steps at 16,384: the base
# code (.stage/base, when carried: the trainer before the later steps' attention became one SDPA call), eager,
# and `--compile`; then the GPU test of the compiled step against the eager one. $OUT/{base,eager,compiled}/.
# The first compiled step compiles (~1-2 min); expect ~5-6 min in all.
source benchmarks/device/env.sh >/dev/null
for mode in base eager compiled; do
  flag=""; path=$PWD
  [ $mode = compiled ] && flag="--compile"
  if [ $mode = base ]; then [ -d /tmp/base/updraft ] || continue; path=/tmp/base; fi
  PYTHONPATH=$path timeout ${SPEED_TIMEOUT:-240} python benchmarks/train_step.py $flag --batch-tokens 16384,32768 \
    --steps 30 --profile 2 --out $OUT/$mode 2>&1 | grep -v -i warn | grep -E "ms/step|profiled" | head -6
  echo "$mode: exit status ${PIPESTATUS[0]}"
done
timeout 200 python -m pytest -q -m gpu tests/train/test_stepper.py 2>&1 | tail -2

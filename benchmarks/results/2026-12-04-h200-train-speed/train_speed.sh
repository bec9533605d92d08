# usage: bash benchmarks/device/train_speed.sh   (no GGUF needed: it can ride on a GGUF-staging call)
# The draft head's optimizer step at SmolLM2-135M's shape (benchmarks/train_step.py: random weights, synthetic data
# with run L's length mix; the shipped recipe's EAGLE-3 head, 5 unrolled steps), each setting in one process at
# 16,384 and 32,768 padded tokens a batch: 30 steps cycling over 8 warmed-up batches, then 40 batches not met
# before (a fresh process's first steps: the cost of new batch shapes). Settings: the later unrolled steps'
# attention as it was before it became one SDPA call (.stage/base, when carried: this tree with the old
# updraft/train/forward.py), eager with batches unpadded (pad 1) and padded to multiples of 64 (the default), and
# `--compile`; then the GPU test of the compiled step against the eager one. $OUT/<setting>/train_step.json.
# The first compiled step compiles (~1-2 min); expect ~5-6 min in all.
source benchmarks/device/env.sh >/dev/null
run() {  # name, PYTHONPATH, flags
  PYTHONPATH=$2 timeout ${SPEED_TIMEOUT:-240} python benchmarks/train_step.py $3 --batch-tokens 16384,32768 --seqs 4000 \
    --steps 30 --cold 40 --out $OUT/$1 2>&1 | grep -v -i warn | grep -E "ms/step" | cut -c1-200
  echo "$1: exit status ${PIPESTATUS[0]}"
}
[ -d /tmp/base/updraft ] && run base /tmp/base ""
run pad1 $PWD "--pad 1"
run eager $PWD "--profile 2"
run compiled $PWD "--compile --profile 2"
timeout 200 python -m pytest -q -m gpu tests/train/test_stepper.py 2>&1 | tail -2

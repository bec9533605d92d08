# usage: [SIZES=16384] bash benchmarks/device/train_speed.sh   (no GGUF needed: it can ride on a GGUF-staging call)
# The draft head's optimizer step at SmolLM2-135M's shape (benchmarks/train_step.py: random weights, synthetic data
# with run L's length mix; the shipped recipe's EAGLE-3 head, 5 unrolled steps, batches padded to multiples of 64),
# compiled and without cuDNN's attention (run M's settings since its second session), at SIZES padded tokens a
# batch: 30 steps cycling over 8 warmed-up batches, 40 batches not met before, then 100 batches built inside the
# timed loop as the trainer builds them (a run's steady state). This tree, then the base (.stage/base when carried:
# `BASE=<commit> bash benchmarks/device/stage.sh` builds it) with its own benchmark script (this tree's imports names
# an older base lacks: on 2026-12-04 it failed against 38db634 at once) and without the loop measurement when that
# script has no --loop, then the GPU tests of the step and its losses. $OUT/<setting>/train_step.json; ~4 min (each
# process compiles first, ~70 s).
# (Earlier versions: benchmarks/results/2026-12-04-h200-train-speed/train_speed.sh, and this file at 5b5a5d0.)
source benchmarks/device/env.sh >/dev/null
run() {  # name, code root (its updraft/ and benchmarks/train_step.py), flags
  local loop="--loop 100"; grep -q -- '"--loop"' $2/benchmarks/train_step.py || loop=""
  PYTHONPATH=$2 timeout ${SPEED_TIMEOUT:-240} python $2/benchmarks/train_step.py $3 --batch-tokens ${SIZES:-16384} --seqs 4000 \
    --steps 30 --cold 40 $loop --out $OUT/$1 2>&1 | grep -v -i warn | grep -E "ms/step|Error" | cut -c1-300
  echo "$1: exit status ${PIPESTATUS[0]}"
}
run compiled-nocudnn $PWD "--compile --sdpa no-cudnn --profile 2"
[ -d /tmp/base/updraft ] && run base-compiled-nocudnn /tmp/base "--compile --sdpa no-cudnn --profile 2"
timeout 200 python -m pytest -q -m gpu tests/train/test_stepper.py tests/train/test_losses.py 2>&1 | tail -2

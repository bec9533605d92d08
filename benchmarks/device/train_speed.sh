# usage: [SIZES=16384] bash benchmarks/device/train_speed.sh   (no GGUF needed: it can ride on a GGUF-staging call)
# The draft head's optimizer step at SmolLM2-135M's shape (benchmarks/train_step.py: random weights, synthetic data
# with run L's length mix; the shipped recipe's EAGLE-3 head, 5 unrolled steps, batches padded to multiples of 64),
# each setting in one process at 16,384 and 32,768 padded tokens a batch (SIZES): 30 steps cycling over 8 warmed-up
# batches, then 40 batches not met before (a fresh process's first steps: the cost of new batch shapes). Settings:
# eager and `--compile`, each with PyTorch's attention kernels (`--sdpa auto`: cuDNN on the H200, a plan built for
# every new shape) and without cuDNN's (`--sdpa no-cudnn`); then the GPU tests of the compiled and the no-cuDNN
# steps against the eager default. $OUT/<setting>/train_step.json. The first compiled step compiles (~70 s);
# expect ~6 min in all, ~4 with SIZES=16384. (The 2026-12-04 version, with the old attention and unpadded
# batches: benchmarks/results/2026-12-04-h200-train-speed/train_speed.sh.)
source benchmarks/device/env.sh >/dev/null
run() {  # name, flags
  timeout ${SPEED_TIMEOUT:-240} python benchmarks/train_step.py $2 --batch-tokens ${SIZES:-16384,32768} --seqs 4000 \
    --steps 30 --cold 40 --out $OUT/$1 2>&1 | grep -v -i warn | grep -E "ms/step" | cut -c1-200
  echo "$1: exit status ${PIPESTATUS[0]}"
}
run eager "--profile 2"
run eager-nocudnn "--sdpa no-cudnn --profile 2"
run compiled "--compile --profile 2"
run compiled-nocudnn "--compile --sdpa no-cudnn --profile 2"
timeout 200 python -m pytest -q -m gpu tests/train/test_stepper.py 2>&1 | tail -2

# Call 1 (carries .whl, .stage/q1 and .stage/base = 38db634, main before the training step stopped waiting on the
# GPU: `BASE=38db634 bash benchmarks/device/stage.sh`): the queued training step beside the base
# (benchmarks/device/train_speed.sh: 16,384 tokens a batch, compiled, no cuDNN attention, the loop measurement as a
# run trains), then the step's and losses' GPU tests. When the loss tests fail, /tmp/use_base makes train.sh train
# with the base's code (and this tree's heads.py / checkpoint.py: the zero-row vocabulary growth); a failure of the
# no-wait test alone leaves the training on this tree (correct, only slower).
source benchmarks/device/env.sh >/dev/null
SIZES=16384 bash benchmarks/device/train_speed.sh 2>&1 | tee /tmp/speed.log
if grep -q " passed" /tmp/speed.log && ! grep -q -E " failed| error" /tmp/speed.log; then
  echo "GPU tests passed: the training calls run this tree"
else
  timeout 120 python -m pytest -q -m gpu tests/train/test_losses.py 2>&1 | tail -2 | tee /tmp/losses.log
  if grep -q " passed" /tmp/losses.log && ! grep -q -E " failed| error" /tmp/losses.log; then
    echo "the losses' GPU tests pass: the training calls run this tree"
  else
    touch /tmp/use_base && echo "the losses' GPU tests failed or did not run: the training calls run the base (train.sh)"
  fi
fi
true

# Run M's third session, call 1 (carries .whl, .stage/q1 and .stage/base = 38db634, main before the step stopped waiting on the GPU,
# from `BASE=38db634 bash benchmarks/device/stage.sh ~/.cache/updraft/runs/M`): the training step queued without
# the host waiting on the GPU (was ~28 waits a step) beside the base (benchmarks/device/train_speed.sh, 16,384 tokens a
# batch, compiled, no cuDNN attention, the loop measurement as a run trains), then its GPU tests. When they fail,
# /tmp/use_base makes train.sh train with the base's code instead (so the schedule finishes either way).
source benchmarks/device/env.sh >/dev/null
SIZES=16384 bash benchmarks/device/train_speed.sh 2>&1 | tee /tmp/speed.log
touch /tmp/nocudnn_ok   # the base's no-cuDNN step passed its GPU test on 2026-12-04; this tree's is in the tests above
if grep -q " passed" /tmp/speed.log && ! grep -q -E " failed| error" /tmp/speed.log; then
  echo "GPU tests passed: the training calls run this tree"
else
  touch /tmp/use_base && echo "GPU tests failed or did not run: the training calls run the base (train.sh)"
fi
true

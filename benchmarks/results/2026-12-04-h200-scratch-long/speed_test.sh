# Run M's third session, call 1 (carries .whl, .stage/q1 and .stage/base = 38db634, main before the step stopped waiting on the GPU,
# from `BASE=38db634 bash benchmarks/device/stage.sh ~/.cache/updraft/runs/M`): the training step queued without
# the host waiting on the GPU (was ~28 waits a step) beside the base (benchmarks/device/train_speed.sh, 16,384 tokens a
# batch, compiled, no cuDNN attention, the loop measurement as a run trains), then its GPU tests. When they pass,
# /tmp/nocudnn_ok tells train.sh to keep `--sdpa no-cudnn` (the tests include the no-cuDNN step's).
source benchmarks/device/env.sh >/dev/null
SIZES=16384 bash benchmarks/device/train_speed.sh 2>&1 | tee /tmp/speed.log
grep -q " passed" /tmp/speed.log && ! grep -q -E " failed| error" /tmp/speed.log && touch /tmp/nocudnn_ok
ls /tmp/nocudnn_ok 2>/dev/null; true

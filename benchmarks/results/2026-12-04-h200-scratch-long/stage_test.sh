# Session 2 of run M, call 1 (carries .whl and .stage/q1): stages the GGUF's first part and runs the GPU test of the
# no-cuDNN attention step against the default one (tests/train/test_stepper.py); when it passes, /tmp/nocudnn_ok
# tells train.sh to train with `--sdpa no-cudnn` (no cuDNN attention plan per new batch shape).
source benchmarks/device/env.sh >/dev/null
timeout 150 python -m pytest -q -m gpu tests/train/test_stepper.py -k no_cudnn 2>&1 | tail -3
[ ${PIPESTATUS[0]} = 0 ] && touch /tmp/nocudnn_ok
ls /tmp/nocudnn_ok 2>/dev/null; true

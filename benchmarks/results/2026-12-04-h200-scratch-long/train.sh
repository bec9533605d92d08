# Run M's training calls (after stage_test.sh or speed_test.sh and the staging calls q2, q3, p5, p4; the first carries
# q4): resume.sh with the compiled step, without cuDNN's attention when the first call's GPU test passed on this
# machine. From the third session: when speed_test.sh found this tree's GPU tests failing (/tmp/use_base), the
# trainer runs the base's code (/tmp/base, 38db634, whose no-cuDNN step passed its GPU test on 2026-12-04) through
# a python that does not put the checkout first on its path.
XA="--compile"; [ -f /tmp/nocudnn_ok ] && XA="--compile --sdpa no-cudnn"
if [ -f /tmp/use_base ] && [ -d /tmp/base/updraft ]; then
  printf '#!/bin/sh\nPYTHONPATH=/tmp/base exec python -P "$@"\n' > /tmp/pyb && chmod +x /tmp/pyb
  export PYTHON=/tmp/pyb
  echo "training with the base's code: $(/tmp/pyb -c 'import updraft; print(updraft.__file__)')"
fi
echo "XA=$XA"
STEPS=60000 BT=16384 XA="$XA" TB=${TB:-540} bash benchmarks/results/2026-12-04-h200-scratch-long/resume.sh

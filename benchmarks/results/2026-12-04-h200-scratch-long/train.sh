# Session 2 of run M, training calls (after stage_test.sh and the staging calls q2, q3, p5, p4; the first carries q4):
# resume.sh with the compiled step, without cuDNN's attention when stage_test.sh's GPU test passed on this machine.
XA="--compile"; [ -f /tmp/nocudnn_ok ] && XA="--compile --sdpa no-cudnn"
echo "XA=$XA"
STEPS=60000 BT=16384 XA="$XA" TB=${TB:-540} bash benchmarks/results/2026-12-04-h200-scratch-long/resume.sh

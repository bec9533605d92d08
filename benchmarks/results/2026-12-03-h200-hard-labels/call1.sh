# Calls 1-2 carry the first two parts of the default GGUF's xz stream (.stage/p1, .stage/p2); nothing else runs.
R=benchmarks/results/2026-12-03-h200-hard-labels
source benchmarks/device/env.sh >/dev/null
ls -la /tmp/c | grep part; python -c "import torch, triton; print(torch.__version__, triton.__version__)"

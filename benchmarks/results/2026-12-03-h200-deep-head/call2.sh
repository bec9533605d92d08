# Calls 2 and 3 carry GGUF parts 2 and 3 (nothing else runs: the target is not whole yet).
source benchmarks/device/env.sh
ls -la /tmp/c

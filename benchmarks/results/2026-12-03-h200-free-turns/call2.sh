# Calls 2 and 3 (carry GGUF parts 2 and 3): staging only (benchmarks/device/env.sh copies the part under /tmp/c)
R=benchmarks/results/2026-12-03-h200-free-turns
source benchmarks/device/env.sh >/dev/null; ls /tmp/c

# Call 2 carries the second part of the GGUF's xz stream (.stage/p2); nothing else runs.
R=benchmarks/results/2026-12-03-h200-double-data
source benchmarks/device/env.sh >/dev/null
ls -la /tmp/c | grep part

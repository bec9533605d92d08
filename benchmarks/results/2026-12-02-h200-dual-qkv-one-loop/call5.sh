# call 5 (H200, back to back; carries .stage/p1, .stage/base, .whl): stages the GGUF's part 1 under /tmp/c (env.sh)
R=benchmarks/results/2026-12-02-h200-dual-qkv-one-loop
source benchmarks/device/env.sh
ls /tmp/c

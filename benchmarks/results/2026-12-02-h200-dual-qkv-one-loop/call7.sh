# call 7 (H200, back to back; carries .stage/p3, .whl): stages the GGUF's part 3 under /tmp/c (env.sh)
R=benchmarks/results/2026-12-02-h200-dual-qkv-one-loop
source benchmarks/device/env.sh
ls /tmp/c

# Calls 2-3 (carry .whl and .stage/q2, then .stage/q3): the GGUF's xz parts, joined once the fourth arrives.
source benchmarks/device/env.sh >/dev/null
ls /tmp/c

# call 10: carry .stage/b (nothing else runs).
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh; ls /tmp/c

# calls 3-4 and 9-10: carry GGUF parts a (.stage/a), then b (.stage/b); nothing else runs
source benchmarks/results/2026-11-27-h100-sampled-data/env.sh; ls -la /tmp/c

# calls 3-4, 9-10 and 13-14: carry GGUF parts a (.stage/a), then b (.stage/b); nothing else runs
source benchmarks/results/2026-11-27-h100-sampled-data/env.sh; ls -la /tmp/c

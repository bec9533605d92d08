# calls 2-3: carry GGUF parts a and b (nothing else runs)
source benchmarks/results/2026-11-27-h100-sampled-data/env.sh; ls -la /tmp/c

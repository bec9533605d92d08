# call 3 (call 2's machine): GGUF part 2
source benchmarks/results/2026-11-27-h100-sampled-accept/env.sh
cp .stage/b/gguf.part.ab /tmp/c/; ls -la /tmp/c

source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
cp .stage/b/gguf.part.ab /tmp/c/ && ls -la /tmp/c

# (a third machine: call 9 found none of calls 6-8's files) stage part 3 and join the GGUF
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
cp -r .stage/c/eagle-eval /tmp/c/ && cat /tmp/c/gguf.part.aa /tmp/c/gguf.part.ab .stage/c/gguf.part.ac > $GGUF && rm /tmp/c/gguf.part.* && sha256sum $GGUF | cut -c1-16

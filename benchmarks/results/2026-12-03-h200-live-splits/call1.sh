# Call 1: the decode kernel's split merge in its own launch, only among the splits that hold keys (a lone live
# split writes the output; splits past the context return at once; the merge reads several splits a load), with
# split floors of 128 / 256 keys (TritonBackend.decode_min_split), against the merge launch (base) and base +
# skip_empty (the verify-window folder's call 6, never run), in the S = 5 cycle and the plain step (SmolLM2 +
# builtin head, random weights), alternating rounds; the GPU test of the in-kernel merge first, the attention
# sweep last. Each run's rounds go to a log under $OUT as they finish (a timeout keeps them).
R=benchmarks/results/2026-12-03-h200-live-splits
source benchmarks/device/env.sh
timeout 60 python -m pytest -m gpu -q tests/ops/test_gemv_gpu.py -k in_kernel_merge 2>&1 | tail -2
V=base,skip_empty,merge_in_kernel,min_split128+merge_in_kernel,min_split256+merge_in_kernel
for bs in 1 8; do
  timeout 150 python benchmarks/cycle_variants.py --bs $bs --rounds 2 --variants $V --out $OUT/c512-bs$bs \
    > $OUT/c512-bs$bs.log 2>&1; grep -v Warning $OUT/c512-bs$bs.log | tail -5 | sed "s/^/ctx 512 bs $bs /"
done
V4=base,merge_in_kernel,min_split256+merge_in_kernel
for bs in 1 8; do
  timeout 90 python benchmarks/cycle_variants.py --bs $bs --rounds 2 --context 4096 --variants $V4 \
    --out $OUT/c4096-bs$bs > $OUT/c4096-bs$bs.log 2>&1; grep -v Warning $OUT/c4096-bs$bs.log | tail -3 | sed "s/^/ctx 4096 bs $bs /"
done
timeout 60 python -m pytest -m gpu -q tests/attention/test_triton_gpu.py 2>&1 | tail -2

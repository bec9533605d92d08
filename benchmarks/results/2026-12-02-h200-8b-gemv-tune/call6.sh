# Call 6: the 8B shape's 2- and 4-row buckets swept on the H200 (decode at bs 2-4; they took the
# H100's entries), then the decode steps at bs 2 and 4 with them (the sweep's cache) against
# without (an empty cache: the shipped table), rounds alternating.
R=benchmarks/results/2026-12-02-h200-8b-gemv-tune
source benchmarks/device/env.sh
timeout 240 python benchmarks/decode_kernels.py --out $OUT/tune24 --tune --models llama8b --gemms qkv,o,gate_up,down \
    --m-values 2,4 --skip-steps --peak-bw 4.279e12 2>&1 | grep -v Warn | tail -12
cp /tmp/c/gemv_configs.json $OUT/gemv_configs-call6.json
mkdir -p /tmp/empty
for v in new old old new; do
  c=/tmp/c; [ $v = old ] && c=/tmp/empty
  UPDRAFT_CACHE=$c timeout 90 python benchmarks/decode_kernels.py --out $OUT/steps24_$v --models llama8b \
      --skip-gemms --variants fused --batch-sizes 2,4 --peak-bw 4.279e12 > $OUT/steps24_$v.log 2>&1
  grep -E "^ +llama8b +[24] +DECODE" $OUT/steps24_$v.log | sed "s/^/$v /"
done

# call 3 (H200; carries .stage/base, .whl): the shipped change (unmasked whole blocks, FMA scale, MMA-accumulated
# p @ v, the prefill tile policy) against main before it: attention_bench's prefill rows both ways, twice
# (alternating), then the GPU attention tests with the new tiles
R=benchmarks/results/2026-12-02-h200-prefill-tiles
source benchmarks/device/env.sh
for round in 1 2; do for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/attention_bench.py --only prefill --peak-tbps 4.3 \
     --out $OUT/attention_prefill_${side}_$round.json 2>&1 | grep -E "^\|" | tail -3); echo "bench $side round $round rc $?"
done; done
timeout 200 python -m pytest -q -p no:cacheprovider tests/attention/test_triton_gpu.py 2>&1 | tail -2
(cd $OUT && tar czf call3.tgz --remove-files *)

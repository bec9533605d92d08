# call 2 (H200; carries .stage/base, .whl): the extend kernel with the scale in the exponent's FMA and p @ v
# accumulated into acc inside the MMA (new) against main before the change (base): GPU attention tests,
# attention_bench's prefill rows both ways, then the nine-candidate sweep over eight prefill shapes
R=benchmarks/results/2026-12-02-h200-prefill-tiles
source benchmarks/device/env.sh
timeout 150 python -m pytest -q -p no:cacheprovider tests/attention/test_triton_gpu.py 2>&1 | tail -2
for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/attention_bench.py --only prefill --peak-tbps 4.3 \
     --out $OUT/attention_prefill_$side.json 2>&1 | grep -E "^\|" | tail -4); echo "bench $side rc $?"
done
timeout 330 python benchmarks/prefill_sweep.py --quick --out $OUT 2>&1 | grep -v Warn
(cd $OUT && tar czf call2.tgz --remove-files *)

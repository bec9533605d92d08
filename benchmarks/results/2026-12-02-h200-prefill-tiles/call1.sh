# call 1 (H200, warm after the persistent probe's call; carries .stage/base, .whl): the extend kernel's unmasked
# whole blocks (new) against main before it (base, /tmp/base): the GPU attention tests, attention_bench's prefill
# rows both ways, then the tile sweep (new kernel) for Llama-3-8B's and SmolLM2's heads
R=benchmarks/results/2026-12-02-h200-prefill-tiles
source benchmarks/device/env.sh
timeout 150 python -m pytest -q -p no:cacheprovider tests/attention/test_triton_gpu.py 2>&1 | tail -2
for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/attention_bench.py --only prefill --peak-tbps 4.3 \
     --out $OUT/attention_prefill_$side.json 2>&1 | grep -E "^\|" | tail -4); echo "bench $side rc $?"
done
timeout 400 python benchmarks/prefill_sweep.py --out $OUT 2>&1 | grep -v Warn
(cd $OUT && tar czf call1.tgz --remove-files *)

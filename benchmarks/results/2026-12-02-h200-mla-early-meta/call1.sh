# Call 1 (fresh machine; carries .whl and .stage/base = main before the change, 9999859): the MLA decode
# kernel reading its metadata (lengths, pool rows, first slots) before the PDL wait. First the GPU tests of
# the small-M kernels (the shipped table of 9999859 with its 24- and 48-row cases) and of MLA, then
# mla_bench decode at 16 heads with the model's side (--latent), new / base / new.
R=benchmarks/results/2026-12-02-h200-mla-early-meta
source benchmarks/device/env.sh
here=$PWD
timeout 100 python -m pytest -q -m gpu -p no:cacheprovider tests/ops/test_gemv_gpu.py 2>&1 | tail -2
timeout 100 python -m pytest -q -m gpu -p no:cacheprovider tests/attention/test_mla_gpu.py 2>&1 | tail -2
for v in new base new; do
  n=1; [ -f $OUT/mla_${v}_1.json ] && n=2
  src=$here; [ $v = base ] && src=/tmp/base
  (cd $src && PYTHONPATH=$src timeout 100 python benchmarks/mla_bench.py --heads 16 --only decode --latent --repeats 10 \
      --out $OUT/mla_${v}_$n.json > $OUT/mla_${v}_$n.log 2>&1)
  echo "== $v $n"; grep -E "^\|" $OUT/mla_${v}_$n.log | head -14
done
(cd $OUT && tar czf call1.tgz --remove-files *)

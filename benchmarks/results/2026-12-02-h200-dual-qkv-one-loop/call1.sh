# call 1 (H200, a fresh machine; carries .stage/base, .whl): EAGLE-3's QKV in one K loop over both inputs (new)
# against two loops one after the other (base = main before it): the GPU gemv / op tests, the S = 5 cycle's cost
# side by side (random SmolLM2 + the shipped head), and each kernel's own time in the cycle (PDL off)
R=benchmarks/results/2026-12-02-h200-dual-qkv-one-loop
source benchmarks/device/env.sh
timeout 150 python -m pytest -q -p no:cacheprovider tests/ops/test_gemv_gpu.py 2>&1 | tail -3
bash benchmarks/device/cost_pair.sh dual1 --random-smollm
for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir UPDRAFT_PDL=0 timeout 150 python benchmarks/cycle_profile.py --random-smollm --sizes 1 \
     --out $OUT/cycle_pdl0_$side > $OUT/cycle_pdl0_$side.log 2>&1); echo "profile $side rc $?"
  grep -E "^==|minus" $OUT/cycle_pdl0_$side.log | head -8
done
(cd $OUT && tar czf call1.tgz --remove-files *)

# call 1 (H200, a fresh machine; random weights, no GGUF): the GPU gemv / op tests (H200 table entries, the shared
# RMSNorm helper), the grid-barrier probe (PDL launch boundary vs a grid barrier in one launch), the draft step's
# five GEMVs as production launches vs one persistent launch, and the cycle's kernels in launch order (PDL off)
R=benchmarks/results/2026-12-02-h200-persistent-probe
source benchmarks/device/env.sh
timeout 200 python -m pytest -q -p no:cacheprovider tests/ops/test_gemv_gpu.py tests/ops/test_ops_gpu.py 2>&1 | tail -3
timeout 120 python benchmarks/grid_barrier_probe.py --out $OUT/barrier.json 2>&1 | tail -30
timeout 120 python benchmarks/grid_barrier_probe.py --gemv-chain --out $OUT/chain.json 2>&1 | tail -20
UPDRAFT_PDL=0 timeout 150 python benchmarks/cycle_profile.py --random-smollm --sizes 1 --out $OUT/cycle_pdl0 > $OUT/cycle_pdl0.log 2>&1
echo "profile rc $?"; grep -E "^==" $OUT/cycle_pdl0.log | head -8
(cd $OUT && tar czf call1.tgz --remove-files *)

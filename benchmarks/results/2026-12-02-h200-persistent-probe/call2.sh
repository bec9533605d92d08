# call 2 (H200; carries .whl): cycle_profile.py with admit's kernels left out of each replay's block (PDL off, bs 1)
R=benchmarks/results/2026-12-02-h200-persistent-probe
source benchmarks/device/env.sh
UPDRAFT_PDL=0 timeout 150 python benchmarks/cycle_profile.py --random-smollm --sizes 1 --out $OUT/cycle_pdl0 > $OUT/cycle_pdl0.log 2>&1
echo "profile rc $?"; grep -E "^==|admit" $OUT/cycle_pdl0.log | head -8
(cd $OUT && tar czf call2.tgz --remove-files *)

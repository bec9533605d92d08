# call 1: GGUF part 1; per-kernel times with PDL off (each kernel's own time): SmolLM2 decode vs
# 6-token verify (bs 1, 8; default policy and 64-row fused layers), the S = 5 cycle (random
# SmolLM2 shape + builtin:smollm2, bs 1 and 8) with PDL off and on; host profile (random target)
source benchmarks/results/2026-11-27-h100-cycle-kernels/env.sh
cp .stage/a/gguf.part.aa /tmp/c/
UPDRAFT_PDL=0 timeout 150 python benchmarks/decode_kernels.py --models smollm2 --skip-gemms --variants fused,fused_rows64 \
  --batch-sizes 1,8 --out /tmp/dk0 2>&1 | grep -v Warn | tail -14
cp /tmp/dk0/decode_kernels.json $OUT/run1-decode_kernels-pdl0.json
UPDRAFT_PDL=0 timeout 150 python benchmarks/cycle_profile.py --random-smollm --sizes 1,8 --out /tmp/cp0 2>&1 | grep -v Warn | tail -16
cp /tmp/cp0/cycle_profile.json $OUT/run1-cycle_profile-pdl0.json
timeout 120 python benchmarks/cycle_profile.py --random-smollm --sizes 1,8 --out /tmp/cp1 2>&1 | grep -v Warn | tail -16
cp /tmp/cp1/cycle_profile.json $OUT/run1-cycle_profile.json
timeout 100 python benchmarks/host_profile.py --model random:smollm2-135m --head builtin:smollm2 --bs 1 32 1 --steps 150 \
  --out $OUT/run1-host_profile.json 2>&1 | grep "^bs "

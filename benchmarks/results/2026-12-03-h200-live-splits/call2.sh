# Call 2: decode and 6-token verify steps alone (step_pair.py, 1k tokens of context), both models, bs 1 and 8:
# base against the in-kernel merge among live splits, alternating rounds; then the EAGLE-3 head's 6-row QKV
# (the draft extend's; H100 configs on the H200 until now) tuned inside the bs-1 S = 5 cycle.
R=benchmarks/results/2026-12-03-h200-live-splits
source benchmarks/device/env.sh
M=merge_in_kernel
timeout 240 python benchmarks/step_pair.py --models smollm2,llama8b --batch-sizes 1,8 \
  --variants base,$M,base,$M --out $OUT/pair > $OUT/pair.log 2>&1; tail -24 $OUT/pair.log
timeout 200 python benchmarks/tune_in_cycle.py --bs 1 --rows 6 --gemms head_qkv --prefilter 6 --out $OUT/tune6 \
  > $OUT/tune6.log 2>&1; grep -v Warning $OUT/tune6.log | tail -12

# Call 2: decode and 6-token verify steps alone (step_pair.py, 1k tokens of context), both models, bs 1 and 8:
# base against the in-kernel merge among live splits (with and without a 256-key split floor), alternating rounds.
R=benchmarks/results/2026-12-03-h200-live-splits
source benchmarks/device/env.sh
M=merge_in_kernel
F=min_split256+merge_in_kernel
timeout 300 python benchmarks/step_pair.py --models smollm2,llama8b --batch-sizes 1,8 \
  --variants base,$M,$F,base,$M,$F --out $OUT/pair > $OUT/pair.log 2>&1; tail -30 $OUT/pair.log

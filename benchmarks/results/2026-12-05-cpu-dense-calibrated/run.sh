#!/usr/bin/env bash
# The README's demo under the old fixed choice (UPDRAFT_CPU_DENSE=mm: what ops.dense did before this
# change) and the calibrated one (auto), alternating twice; then the two forms' table and the plan.
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=benchmarks/results/2026-12-05-cpu-dense-calibrated
: > $D/demo.log
for round in 1 2; do
  for mode in mm auto; do
    echo "== round $round UPDRAFT_CPU_DENSE=$mode" >> $D/demo.log
    UPDRAFT_CPU_DENSE=$mode .venv/bin/updraft generate --chat "Explain speculative decoding in two sentences." \
      --max-tokens 96 --speculative-algorithm EAGLE3 --speculative-draft-model-path builtin:smollm2 \
      --compare-plain 2>&1 | grep "^\[" >> $D/demo.log
  done
done
.venv/bin/python benchmarks/cpu_dense.py --rows 1,2,3,4,6,8,16,32,64 --repeats 3 --out $D > $D/cpu_dense.log 2>&1

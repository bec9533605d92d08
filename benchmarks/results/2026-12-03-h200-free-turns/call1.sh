# Call 1 (carries GGUF part 1 of 4): the draft's attention alone merging its KV splits in its own launch
# (cycle_variants knob draft_merge_in_kernel: the chain's steps and the draft extend; the target keeps its merge
# launch) against the shipped settings, S = 5 cycle and plain step, SmolLM2 + builtin head, random weights,
# alternating rounds. Each run's log goes under $OUT as its rounds finish.
R=benchmarks/results/2026-12-03-h200-free-turns
source benchmarks/device/env.sh
V=base,draft_merge_in_kernel
for run in "1 512 3 110" "8 512 3 110" "1 4096 2 80"; do
  set -- $run
  timeout $4 python benchmarks/cycle_variants.py --bs $1 --context $2 --rounds $3 --variants $V --out $OUT/c$2-bs$1 \
    > $OUT/c$2-bs$1.log 2>&1; grep -v Warning $OUT/c$2-bs$1.log | tail -2 | sed "s/^/ctx $2 bs $1 /"
done
ls /tmp/c

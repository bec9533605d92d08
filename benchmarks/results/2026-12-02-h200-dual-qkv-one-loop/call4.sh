# call 4 (H200; carries .stage/base, .whl): the change as shipped (one-loop head QKV with both prefetches, and the
# H200's 1024-wide K chunk for SmolLM2's one-row QKV and the head's) against main before it, four alternating rounds
R=benchmarks/results/2026-12-02-h200-dual-qkv-one-loop
source benchmarks/device/env.sh
for i in 1 2 3 4; do bash benchmarks/device/cost_pair.sh ship$i --random-smollm; done
(cd $OUT && tar czf call4.tgz --remove-files *)

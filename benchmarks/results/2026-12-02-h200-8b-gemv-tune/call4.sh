# Call 4: the 8B S = 5 cycle (EAGLE-3-shaped head) with the chosen H200 entries (cache $V) against
# the H100's (empty cache); then the EAGLE-3 head's 6-row QKV timed in SmolLM2's S = 5 cycle.
R=benchmarks/results/2026-12-02-h200-8b-gemv-tune
source benchmarks/device/env.sh
mkdir -p /tmp/empty
for v in $V h; do
  c=/tmp/empty; [ $v != h ] && c=$PWD/.stage/cache/$v
  UPDRAFT_CACHE=$c timeout 150 python benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless \
      --out $OUT/cost8b_$v > $OUT/cost8b_$v.log 2>&1; grep -v Warn $OUT/cost8b_$v.log | tail -6
done
UPDRAFT_CACHE=/tmp/empty timeout 250 python benchmarks/tune_in_cycle.py --bs 1 --rows 6 --gemms head_qkv \
    --out $OUT/tune_head_qkv6 2>&1 | grep -v Warn | tail -25

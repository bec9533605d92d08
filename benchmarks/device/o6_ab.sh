# usage: bash benchmarks/device/o6_ab.sh      (carrying .whl; random weights, no GGUF)
# One launch config against the shipped one, in alternating processes: SmolLM2's o_proj in the 8-row bucket (a
# 6-token verify, the draft extend) as 32 x 256 instead of 16 x 256, the one candidate that beat the shipped config
# outside its spread in h100_verify.sh's in-cycle tune (2026-12-05: 0.8032 against 0.8110 ms). The candidate goes in
# through a user cache file ($UPDRAFT_CACHE/gemv_configs.json, read before the shipped table); each round runs
# step_pair.py (decode and 6-token verify replays, bs 1) and spec_iteration.py's cycle costs at bs 1 under both. ~4 min.
source benchmarks/device/env.sh >/dev/null
mkdir -p /tmp/ab/base /tmp/ab/o32
UPDRAFT_CACHE=/tmp/ab/o32 python -c "
import torch
from updraft.ops import gemv_config as g
g.store(g.key('linear', 576, 576, 8, torch.bfloat16, torch.device('cuda')), g.GemvConfig(32, 256, True, 4, 3, 0))
print(open(g.cache_path()).read())"
for r in 1 2; do
  for v in base o32; do
    echo "== round $r, $v"
    UPDRAFT_CACHE=/tmp/ab/$v timeout 45 python benchmarks/step_pair.py --out $OUT/pair-$v-$r --models smollm2 \
      --batch-sizes 1 --variants base 2>&1 | grep "verify / decode"
    UPDRAFT_CACHE=/tmp/ab/$v timeout 90 python benchmarks/spec_iteration.py --random-smollm --cost-sizes 1 \
      --out $OUT/cycle-$v-$r 2>&1 | grep -v Warn | grep -E '"(plain_step_ms_bs1|decode_ms_bs1|cycle_ms_greedy_bs1|cycle_steps_greedy_bs1|cycle_ms_sampled_bs1)"'
  done
done

# usage: bash benchmarks/device/context_host.sh      (carrying .whl; no staging: a random SmolLM2-shaped target)
# Where context tokens lose their speed (issue 12; 2026-12-05 on the H100: 0.96x / 0.86x / 0.73x / 0.70x of the
# same head without them at bs 1 / 8 / 32 / 64, the host's work per iteration 3.9-6.4 ms at bs 64 against
# 1.3-1.8). benchmarks/context_pick_bench.py: the pick's launch against the plain argmax at 0-256 held tokens;
# benchmarks/host_profile.py: builtin:smollm2 on random:smollm2-135m at bs 8 and 64, S = 5, without and with
# K = 256 (a random target's tokens are mostly outside the draft vocabulary: every row queues new ones each step,
# the worst case for observe / flush), cProfile of the steady steps. ~3 min.
source benchmarks/device/env.sh >/dev/null
timeout 150 python benchmarks/context_pick_bench.py --out $OUT/pick.json 2>&1 | grep -v Warn
for k in 0 256; do
  timeout 200 python benchmarks/host_profile.py --model random:smollm2-135m --head builtin:smollm2 --bs 8 64 --steps 100 \
    --context-vocab $k --out $OUT/host-ctx$k.json 2>&1 | grep -v Warn | grep -E "^bs|tottime|^ +[0-9]" | head -34
done

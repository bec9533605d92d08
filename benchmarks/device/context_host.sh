# usage: bash benchmarks/device/context_host.sh      (carrying .whl, and .stage/ctxbase: `git archive <base> updraft
#        ':(exclude)updraft/heads'` unpacked there, to time the code before a change in the same call; no GGUF)
# Where context tokens lose their speed (issue 12; 2026-12-05 on the H100: 0.96x / 0.86x / 0.73x / 0.70x of the
# same head without them at bs 1 / 8 / 32 / 64, the host's work per iteration 3.9-6.4 ms at bs 64 against
# 1.3-1.8). benchmarks/context_pick_bench.py: the pick's launch against the plain argmax at 0-256 held tokens;
# benchmarks/host_profile.py: the shipped head on random:smollm2-135m at bs 8 and 64, S = 5, without context
# tokens, then with K = 256 on the base's code and on this tree's (a random target's tokens are mostly outside the
# draft vocabulary: every row queues new ones each step, the worst case for observe / flush), cProfile of the
# steady steps and the lines that made a synchronizing CUDA call. ~4 min.
source benchmarks/device/env.sh >/dev/null
HEAD_DIR=$PWD/updraft/heads/smollm2-135m-instruct-eagle3
profile() {  # name, the updraft to import, K, timeout (s)
  echo "== $1"
  PYTHONPATH=$2 timeout ${4:-110} python benchmarks/host_profile.py --model random:smollm2-135m --head $HEAD_DIR --bs 8 64 \
    --steps 60 --context-vocab $3 --out $OUT/host-$1.json 2>&1 | grep -v Warn | grep -E "^bs|^ +[0-9]" | awk '/^bs/{c=0} c++ < 13'
}
[ -d .stage/ctxbase/updraft ] && profile base-ctx256 $PWD/.stage/ctxbase 256 220  # compiles first: 110 s was too little
profile ctx256 $PWD 256
profile ctx0 $PWD 0
timeout 90 python benchmarks/context_pick_bench.py --shapes smollm2 --bs 8 64 --held 0 64 256 --out $OUT/pick.json 2>&1 | grep -v Warn

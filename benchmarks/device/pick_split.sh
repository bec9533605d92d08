# usage: bash benchmarks/device/pick_split.sh      (carrying .whl and .stage/ctxbase: `git archive <base> updraft
#        ':(exclude)updraft/heads'` unpacked there, the one-program pick's code; no GGUF)
# The context-token pick split over programs (a tile of 8 tokens each, merged by the row's last program) against
# the one-program loop it replaces (29.6 us at 256 held tokens against the argmax's 1.8 on the H100, 2026-12-05):
# benchmarks/context_pick_bench.py on both trees, then host_profile.py's wall time a step on random:smollm2-135m with
# the shipped head at bs 8 and 64, S = 5, with K = 256 context tokens and without. ~4 min.
source benchmarks/device/env.sh >/dev/null
HEAD_DIR=$PWD/updraft/heads/smollm2-135m-instruct-eagle3
for tree in new base; do
  path=$PWD; [ $tree = base ] && path=$PWD/.stage/ctxbase
  echo "== pick, $tree"
  PYTHONPATH=$path timeout 150 python benchmarks/context_pick_bench.py --shapes smollm2 8b --bs 1 8 64 --held 0 64 256 \
    --out $OUT/pick-$tree.json 2>&1 | grep -v Warn
done
for k in 256 0; do
  echo "== host, K $k"
  timeout 150 python benchmarks/host_profile.py --model random:smollm2-135m --head $HEAD_DIR --bs 8 64 --steps 60 \
    --context-vocab $k --out $OUT/host-ctx$k.json 2>&1 | grep -E "^bs .* wall"
done

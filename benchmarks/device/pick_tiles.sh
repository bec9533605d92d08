# usage: bash benchmarks/device/pick_tiles.sh      (carrying .whl; no GGUF)
# The context-token pick's launch shape (`PickTiles`: held tokens a program x warps) swept at SmolLM2's and an
# 8B-shaped head, bs 1 / 8 / 64, 0 / 64 / 256 held tokens, each shape checked against the reference before it is
# timed (benchmarks/context_pick_bench.py --sweep); then host_profile.py's wall time a step on random:smollm2-135m
# with the shipped head at bs 8 and 64, S = 5, with K = 256 context tokens and without. ~4 min.
source benchmarks/device/env.sh >/dev/null
HEAD_DIR=$PWD/updraft/heads/smollm2-135m-instruct-eagle3
timeout 300 python benchmarks/context_pick_bench.py --shapes smollm2 8b --bs 1 8 64 --held 0 64 256 --sweep \
  --out $OUT/pick-sweep.json 2>&1 | grep -v Warn
for k in 256 0; do
  echo "== host, K $k"
  timeout 120 python benchmarks/host_profile.py --model random:smollm2-135m --head $HEAD_DIR --bs 8 64 --steps 60 \
    --context-vocab $k --out $OUT/host-ctx$k.json 2>&1 | grep -E "^bs .* wall"
done

# usage: bash benchmarks/device/split_batch.sh      (carrying .whl; random weights, no GGUF; one call, ~4 min)
# Issue 12's bs-8 cycle: does a batch split into concurrent parts (each part's forward on a stream of its own
# inside one graph) hide the launch latency that makes the 48-row verify ~1.2 bs-8 decode steps?
# `split_batch_probe.py`: SmolLM2 at random weights, 512 tokens, bs 8 in 1 / 2 / 4 / 8 parts, decode and the
# 6-token verify, three alternating rounds, each split graph checked bit for bit against its parts run in turn.
# The gate for an engine form (README of the results folder): a split verify within ~1.08 bs-8 decode steps.
source benchmarks/device/env.sh >/dev/null
timeout 420 python benchmarks/split_batch_probe.py --out $OUT/split --batch-sizes 8 --parts 1,2,4,8 --context 512 \
  --rounds 3 2>&1 | grep -v Warn | tail -14

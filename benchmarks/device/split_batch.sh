# usage: bash benchmarks/device/split_batch.sh 1|2      (carrying .whl; random weights, no GGUF; on an H100 on 2026-12-07 call 1 took 42 s, call 2 86 s)
# Issue 12's bs-8 cycle (1.430 plain steps, goal 1.25): does a batch split into concurrent parts hide the launch
# latency that makes the 48-row verify ~1.2 bs-8 decode steps?
# Call 1: `split_batch_probe.py`: SmolLM2 at random weights, 512 tokens, bs 8 in 1 / 2 / 4 / 8 parts, decode and the
#   6-token verify, each part's forward on a stream of its own inside one graph, three alternating rounds, each
#   split graph checked bit for bit against its parts run in turn. Gate for an engine form: a split verify within
#   ~1.08 bs-8 decode steps.
# Call 2: `split_cycle_probe.py`: the whole S = 5 iteration of bs 8 as 2 / 4 / 8 engines' iterations on concurrent
#   streams behind a sleep gate, against the unsplit cycle and the plain bs-8 step through the same gate.
source benchmarks/device/env.sh >/dev/null
if [ "$1" = 1 ]; then
  timeout 480 python benchmarks/split_batch_probe.py --out $OUT/split --batch-sizes 8 --parts 1,2,4,8 --context 512 \
    --rounds 3 2>&1 | grep -v Warn | tail -14
elif [ "$1" = 2 ]; then
  timeout 480 python benchmarks/split_cycle_probe.py --out $OUT/cycle --bs 8 --parts 2,4,8 --context 512 \
    --rounds 3 2>&1 | grep -v Warn | tail -7
fi

# usage: bash benchmarks/device/head_pick.sh 1|2|3|4|5   (carrying .whl; 5 also one of .stage/q1-q5 a call; ~1-4 min)
# A draft LM head and its argmax without the logits (updraft/spec/head_pick.py, FusedIteration.head_pick;
# benchmarks/results/2026-12-06-h100-head-pick/): call 1 the probe (head_pick_probe.py), the GPU tests and the S = 5
# cycle against head_logits (cuBLAS's head and argmax_rows) at bs 1 and 8, five alternating rounds; call 2 the launch
# shapes swept at 1-8 rows, the GPU tests, the cycle at bs 1, 2, 4 and 8; call 3 the bs-1 cycle over nine rounds (and
# with the weights loaded after the PDL wait), at 4k tokens, a profile, the kit's graph cases on the production runner;
# call 4 issue 12's sampled / greedy cycle (spec_iteration.py's cost part) with HeadPick on and off, twice, random
# weights; call 5 the same on the real SmolLM2 (the GGUF staged over five calls). SAMPLED=1 (calls 4 and 5): the
# sampled drafts' logits from HeadPick's launch too (FusedIteration.sampled_head_logits; off when these calls ran, on
# since the next run, benchmarks/device/sampled_levers.sh, which timed it).
source benchmarks/device/env.sh >/dev/null
V=base,head_logits
if [ "$1" = 1 ]; then
  timeout 150 python benchmarks/head_pick_probe.py --out $OUT/head_pick_probe.json 2>&1 | tail -36
  timeout 240 python -m pytest -q -p no:cacheprovider -m gpu tests/spec/test_head_pick.py tests/spec/test_fused_gpu.py \
    2>&1 | tail -3
  timeout 150 python benchmarks/cycle_variants.py --bs 1 --variants $V --rounds 5 --out $OUT/v-bs1 2>&1 | grep -v Warn | tail -3
  timeout 150 python benchmarks/cycle_variants.py --bs 8 --variants $V --rounds 5 --out $OUT/v-bs8 2>&1 | grep -v Warn | tail -3
elif [ "$1" = 2 ]; then
  # the launch shapes at 1-8 rows (tensor cores past one row), the GPU tests, the cycle at bs 1, 2, 4 and 8
  timeout 150 python benchmarks/head_pick_probe.py --out $OUT/head_pick_probe.json 2>&1 | tail -34
  timeout 240 python -m pytest -q -p no:cacheprovider -m gpu tests/spec/test_head_pick.py tests/spec/test_fused_gpu.py \
    -k "head_pick" 2>&1 | tail -2
  for bs in 1 2 4 8; do
    timeout 100 python benchmarks/cycle_variants.py --bs $bs --variants $V --rounds 3 --out $OUT/v-bs$bs 2>&1 | grep -v Warn | tail -2
  done
elif [ "$1" = 3 ]; then
  timeout 200 python benchmarks/cycle_variants.py --bs 1 --variants $V,head_after_wait --rounds 9 --out $OUT/v-bs1-9 2>&1 \
    | grep -v Warn | tail -3
  timeout 150 python benchmarks/cycle_variants.py --bs 1 --context 4096 --variants $V --rounds 5 --out $OUT/v-bs1-4k 2>&1 | grep -v Warn | tail -3
  timeout 150 python benchmarks/cycle_profile.py --random-smollm --sizes 1,8 --iters 20 --out $OUT/prof 2>&1 | tail -2
  timeout 200 python -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_graphs.py -k "real_graphs and triton" 2>&1 | tail -1
elif [ "$1" = 4 ]; then
  # issue 12's sampled / greedy cycle (spec_iteration's cost part, random weights): HeadPick on, off, on, off
  # (TESTS=1: the GPU tests first)
  [ -n "$TESTS" ] && timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/spec/test_head_pick.py \
    tests/spec/test_fused_gpu.py -k "head_pick" 2>&1 | tail -2
  for r in 1 2; do for on in 1 0; do
    python -c "import runpy, sys; from updraft.spec.fused import FusedIteration as F; F.head_pick = bool($on); \
F.sampled_head_logits = bool(${SAMPLED:-0}); sys.argv = ['spec_iteration.py', '--random-smollm', '--skip-speed', '--skip-lossless', '--cost-sizes', '1,8', \
'--out', '$OUT/cost-r$r-pick$on']; runpy.run_path('benchmarks/spec_iteration.py', run_name='__main__')" >/dev/null 2>&1
    python -c "import json; c = json.load(open('$OUT/cost-r$r-pick$on/spec_iteration.json')); \
c = next(v for k, v in c.items() if k.startswith('cost_')); print('pick $on', ' '.join(f'{k}={c[k]:.4f}' for k in \
[f'{n}_bs{b}' for b in (1, 8) for n in ('plain_step_ms', 'cycle_ms_greedy', 'cycle_steps_greedy', 'cycle_ms_sampled', \
'sampled_over_greedy')]))"
  done; done
elif [ "$1" = 5 ]; then
  # the same on the real SmolLM2 (the goal's measure: the requests' KV written from mt_bench text); five calls, one
  # of .stage/q1-q5 each (the fifth with the eval sets), the GGUF joined on the fifth (TESTS=1: the GPU tests first).
  # Call 5 ran it with HeadPick for greedy drafts only; call 6 (TESTS=1) with the sampled drafts' logits from its launch
  [ -f "$GGUF" ] || { echo "staged so far: $(ls /tmp/c | tr '\n' ' ')"; exit 0; }
  [ -n "$TESTS" ] && timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/spec/test_head_pick.py \
    tests/spec/test_fused_gpu.py -k "head_pick" 2>&1 | tail -2
  for r in 1 2; do for on in 1 0; do
    python -c "import runpy, sys; from updraft.spec.fused import FusedIteration as F; F.head_pick = bool($on); \
F.sampled_head_logits = bool(${SAMPLED:-0}); sys.argv = ['spec_iteration.py', '--smollm', '$GGUF', '--skip-speed', '--skip-lossless', '--cost-sizes', '1,8', \
'--out', '$OUT/real-r$r-pick$on']; runpy.run_path('benchmarks/spec_iteration.py', run_name='__main__')" >/dev/null 2>&1
    python -c "import json; c = json.load(open('$OUT/real-r$r-pick$on/spec_iteration.json')); \
c = next(v for k, v in c.items() if k.startswith('cost_')); print('pick $on', c.get('context'), ' '.join(f'{k}={c[k]:.4f}' \
for k in [f'{n}_bs{b}' for b in (1, 8) for n in ('plain_step_ms', 'cycle_ms_greedy', 'cycle_steps_greedy', \
'cycle_ms_sampled', 'sampled_over_greedy')]))"
  done; done
fi

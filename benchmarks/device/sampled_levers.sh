# usage: bash benchmarks/device/sampled_levers.sh 1|2|3|4|5   (carrying .whl and .stage/q1..q4, one a call, back to back;
#        since the GGUF comes in five parts, carry q4 and q5 in turn at call 4: its first try stages q4 and stops)
# Issue 12's sampled / greedy cycle at bs 1 (goal <= 1.1): launches out of the sampled cycle
# (benchmarks/results/2026-12-06-h100-sampled-levers/): the histogram filter's cut-offs in the filter's launch
# (rejection_kernels.CUT_IN_FILTER, shipped on; knob cut_launch: their own launch), the draft extend's last row
# picked in the acceptance's launch (FusedIteration.sampled_pick_in_accept, shipped on; knob pick_launch) and the
# sampled drafts' logits from HeadPick's launch (FusedIteration.sampled_head_logits, shipped on after this run; knob
# sampled_cublas_head: cuBLAS's head; the run itself, with it still off, named the lever sampled_head_logits). Call 1:
# the filter / acceptance / pick GPU tests, cycle_variants --sampled at bs 1 (four rounds); call 2: bs 8 (three
# rounds) and the fused GPU tests of the iteration's levers; call 3: the profile (kernels, sampled minus greedy);
# call 4: spec_iteration's cost part on the real SmolLM2 (the GGUF joined from the four calls' parts), new / old
# twice in alternating processes (NEW: 'ship' or 'ship+logits', against the cut-offs and the pick in their own
# launches and cuBLAS's head). Call 5 (the shipped defaults, on their own): the sampling, pick and fused GPU tests and
# the kit's graph cases on the production runner.
source benchmarks/device/env.sh >/dev/null
V=base,cut_launch+pick_launch+sampled_cublas_head,cut_launch,pick_launch,sampled_cublas_head
if [ "$1" = 1 ]; then
  timeout 200 python -m pytest -q -p no:cacheprovider tests/spec/test_filter_rows.py tests/spec/test_rejection_kernels.py \
    tests/spec/test_last_row.py 2>&1 | tail -2
  timeout 380 python benchmarks/cycle_variants.py --bs 1 --sampled --variants $V --rounds 4 --out $OUT/s-bs1 2>&1 \
    | grep -v Warn | tail -6
elif [ "$1" = 2 ]; then
  timeout 250 python benchmarks/cycle_variants.py --bs 8 --sampled --variants $V --rounds 3 --out $OUT/s-bs8 2>&1 \
    | grep -v Warn | tail -6
  timeout 300 python -m pytest -q -p no:cacheprovider -m gpu tests/spec/test_fused_gpu.py \
    -k "sampled_pick or cut_in_filter or extend_rows_beside or head_pick" 2>&1 | tail -3
elif [ "$1" = 3 ]; then
  # the sampled and greedy bodies' kernels (sampled minus greedy per kernel name)
  timeout 200 python benchmarks/cycle_profile.py --random-smollm --sizes 1,8 --iters 20 --out $OUT/prof 2>&1 | tail -4
elif [ "$1" = 4 ]; then
  [ -f "$GGUF" ] || { echo "staged so far: $(ls /tmp/c | tr '\n' ' ')"; exit 0; }
  NEW=${NEW:-ship}
  LOGITS=$([ "$NEW" = "ship+logits" ] && echo True || echo False)
  for r in 1 2; do for v in new old; do
    if [ $v = new ]; then set_="R.CUT_IN_FILTER = True; F.sampled_pick_in_accept = True; F.sampled_head_logits = $LOGITS"
    else set_="R.CUT_IN_FILTER = False; F.sampled_pick_in_accept = False; F.sampled_head_logits = False"; fi
    # (NEW=ship: the new launches with cuBLAS's head)
    python -c "import runpy, sys; from updraft.spec.fused import FusedIteration as F; from updraft.spec import \
rejection_kernels as R; $set_; sys.argv = ['spec_iteration.py', '--smollm', '$GGUF', '--skip-speed', '--skip-lossless', \
'--cost-sizes', '1,8', '--out', '$OUT/real-r$r-$v']; runpy.run_path('benchmarks/spec_iteration.py', run_name='__main__')" \
      >/dev/null 2>&1
    python -c "import json; c = json.load(open('$OUT/real-r$r-$v/spec_iteration.json')); \
c = next(v for k, v in c.items() if k.startswith('cost_')); print('$v', c.get('context'), ' '.join(f'{k}={c[k]:.4f}' \
for k in [f'{n}_bs{b}' for b in (1, 8) for n in ('plain_step_ms', 'cycle_ms_greedy', 'cycle_ms_sampled', \
'sampled_over_greedy')]))"
  done; done
elif [ "$1" = 5 ]; then
  timeout 420 python -m pytest -q -p no:cacheprovider tests/spec/test_last_row.py tests/spec/test_filter_rows.py \
    tests/spec/test_rejection_kernels.py tests/spec/test_head_pick.py tests/spec/test_fused_gpu.py 2>&1 | tail -3
  timeout 150 python -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_graphs.py -k "real_graphs and triton" 2>&1 | tail -1
fi

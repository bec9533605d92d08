# Call 6 (fresh machine; carries .whl and .stage/base = main before the change): the shipped table with
# the H200's 48-row SmolLM2 entries (o_proj, gate/up, down; from call 3's in-cycle tune) and the 8B
# shape's 16- / 32-row entries: the kernels against float64 at 1-48 rows; SmolLM2 steps (bs 8 decode
# and 48-row verify, decode at 48 and 64 rows) and the S = 5 cycle costs at bs 1 and 8, against main
# before the change, alternating, empty user cache.
R=benchmarks/results/2026-12-02-h200-verify48-tune
source benchmarks/device/env.sh
mkdir -p /tmp/empty
here=$PWD
UPDRAFT_CACHE=/tmp/empty timeout 200 python -m pytest -m gpu -q tests/ops/test_gemv_gpu.py -k real_shapes -p no:cacheprovider 2>&1 | tail -3
for v in new base new base; do
  n=1; [ -f $OUT/steps_${v}_1/decode_kernels.json ] && n=2
  src=$here; [ $v = base ] && src=/tmp/base
  (cd $src && PYTHONPATH=$src UPDRAFT_CACHE=/tmp/empty timeout 100 python benchmarks/decode_kernels.py --out $OUT/steps_${v}_$n \
      --models smollm2 --skip-gemms --variants fused --batch-sizes 8,48,64 --peak-bw 4.279e12 > $OUT/steps_${v}_$n.log 2>&1)
  python - $OUT/steps_${v}_$n/decode_kernels.json $v <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], " ".join(f"{s['mode'][:6]}:bs{s['bs']}={s['ms']:.4f}" for s in d["steps"] if s["model"] == "smollm2"))
PY
done
for v in new base new base; do
  n=1; [ -f $OUT/cost_${v}_1/spec_iteration.json ] && n=2
  src=$here; [ $v = base ] && src=/tmp/base
  (cd $src && PYTHONPATH=$src UPDRAFT_CACHE=/tmp/empty timeout 120 python benchmarks/spec_iteration.py --random-smollm \
      --cost-sizes 1,8 --skip-speed --skip-lossless --out $OUT/cost_${v}_$n > $OUT/cost_${v}_$n.log 2>&1)
  python - $OUT/cost_${v}_$n/spec_iteration.json $v <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["cost_smollm2_random"]
print(sys.argv[2], " ".join(f"bs{b}: plain {d[f'plain_step_ms_bs{b}']:.4f} cycle {d[f'cycle_ms_greedy_bs{b}']:.4f} "
                            f"({d[f'cycle_steps_greedy_bs{b}']:.3f}) sampled/greedy {d[f'sampled_over_greedy_bs{b}']:.3f}" for b in (1, 8)))
PY
done

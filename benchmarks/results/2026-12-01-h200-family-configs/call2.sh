# call 2 (H200): H100-tuned configs by family vs the heuristic; FMA tiles (sums after the K loop) tuned in the cycle
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c PYTHONUNBUFFERED=1
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
mkdir -p /tmp/c $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
nofam() {  # the same code with no family fallback: an H200 gets the heuristic configs
  python - "$@" <<'PY'
import runpy, sys
import updraft.ops.gemv_config as g
g._shipped_families = lambda: {}
sys.argv = ["step_pair.py"] + sys.argv[1:]
runpy.run_path("benchmarks/step_pair.py", run_name="__main__")
PY
}
nofam --out $OUT/pair-heuristic --models smollm2 --batch-sizes 1,8 2>&1 | grep -A8 "^decode and"
python benchmarks/step_pair.py --out $OUT/pair-family --models smollm2 --batch-sizes 1,8 2>&1 | grep -A8 "^decode and"
timeout 400 python benchmarks/tune_in_cycle.py --bs 1 --rows 6 --tiles fma --store --out $OUT/tune-bs1 2>&1 | grep -v Warn
cp /tmp/c/gemv_configs.json $OUT/ 2>/dev/null
python benchmarks/step_pair.py --out $OUT/pair-fma --models smollm2 --batch-sizes 1,8 2>&1 | grep -A8 "^decode and"

# call 6 (H200): the 6-row bucket's tensor-core tiles tuned in the S = 5 cycle on the H200 itself
# (on top of the H100's entries, which it takes by family); decode / verify before and after
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c PYTHONUNBUFFERED=1
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
mkdir -p /tmp/c $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python benchmarks/step_pair.py --out $OUT/pair-before --models smollm2 --batch-sizes 1,8 2>&1 | grep -A8 "^decode and"
timeout 240 python benchmarks/tune_in_cycle.py --bs 1 --rows 6 --tiles dot --store --out $OUT/tune-bs1 2>&1 | grep -E "^[a-z_]+: best|bs 1,"
cp /tmp/c/gemv_configs.json $OUT/ 2>/dev/null
python benchmarks/step_pair.py --out $OUT/pair-after --models smollm2 --batch-sizes 1,8 2>&1 | grep -A8 "^decode and"

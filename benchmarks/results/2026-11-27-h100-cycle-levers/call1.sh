# calls 1-2: the cycle levers side by side (random weights, no GGUF needed); call 1 stopped at
# the parked requests (max_running_requests 8 for 9 rows), call 2 ran after the fix
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python benchmarks/results/2026-11-27-h100-cycle-levers/levers.py $OUT --reps 2 2>&1 | tee $OUT/call1-levers.log | grep -v Warning

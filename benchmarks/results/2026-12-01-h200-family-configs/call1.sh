# call 1: FMA tiles that sum their products after the K loop, tuned in the cycle for the 6-row bucket (bs 1)
set -x
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c PYTHONUNBUFFERED=1
mkdir -p /tmp/c $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton; print(torch.__version__, triton.__version__)"
python benchmarks/step_pair.py --out $OUT/pair-before --models smollm2 --batch-sizes 1,8 2>&1 | tail -12
timeout 420 python benchmarks/tune_in_cycle.py --bs 1 --rows 6 --tiles fma --store --out $OUT/tune-bs1 2>&1 | grep -v Warning
cp /tmp/c/gemv_configs.json $OUT/ 2>/dev/null
python benchmarks/step_pair.py --out $OUT/pair-after --models smollm2 --batch-sizes 1,8 2>&1 | tail -12

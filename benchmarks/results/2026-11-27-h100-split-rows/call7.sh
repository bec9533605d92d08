# call 7 (a later lease): the bs-8 cycle with one candidate 48-row QKV or gate/up config at a time (user cache;
# insitu_variants.py), against the shipped table before, between and after
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
R=benchmarks/results/2026-11-27-h100-split-rows
mkdir -p /tmp/v/shipped
NAMES=$(python $R/insitu_variants.py /tmp/v)
for v in shipped $NAMES shipped; do
  UPDRAFT_CACHE=/tmp/v/$v timeout 60 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
    --cost-sizes 8 --out /tmp/s7-$v > /tmp/s7-$v.log 2>&1 || tail -3 /tmp/s7-$v.log
  grep -E '"(plain_step_ms|cycle_ms_greedy)_bs' /tmp/s7-$v/spec_iteration.json | tr -d '\n '; echo " <- $v"
done | tee $OUT/call7-insitu.log

# call 7 (H200): the attention kit's full matrix on CUDA (the last device minutes; --quick if the full one runs out)
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c PYTHONUNBUFFERED=1
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
mkdir -p $OUT
timeout 205 python -m updraft.cli kit run --device cuda --jobs 6 --no-progress --json $OUT/kit.json --out $OUT/attention-matrix-h200.md > $OUT/kit.log 2>&1
echo "full matrix rc=$?"; tail -6 $OUT/kit.log
if [ ! -f $OUT/attention-matrix-h200.md ]; then
  timeout 60 python -m updraft.cli kit run --device cuda --quick --jobs 6 --no-progress --out $OUT/attention-matrix-h200-quick.md > $OUT/kit-quick.log 2>&1
  echo "quick rc=$?"; tail -6 $OUT/kit-quick.log
fi

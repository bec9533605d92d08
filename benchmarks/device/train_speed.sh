# usage: bash benchmarks/device/train_speed.sh   (no GGUF needed: it can ride on a GGUF-staging call)
# The draft head's optimizer step at SmolLM2-135M's shape (benchmarks/train_step.py, random weights, synthetic
# data; the shipped recipe's EAGLE-3 head, 5 unrolled steps): eager against `--compile`, each at 16,384 and 32,768
# padded tokens a batch in one process (the compiled forward compiles once, with dynamic shapes), a profile of 2
# steps at 16,384; then the GPU test of the compiled step against the eager one. $OUT/{eager,compiled}/train_step.json.
# The first compiled step compiles (~1-2 min); expect ~4-5 min in all.
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for mode in eager compiled; do
  flag=""; [ $mode = compiled ] && flag="--compile"
  timeout ${SPEED_TIMEOUT:-240} python benchmarks/train_step.py $flag --batch-tokens 16384,32768 --steps 30 --profile 2 \
    --out $OUT/$mode 2>&1 | grep -v -i warn | grep -E "ms/step|profiled|^ +[0-9.]+ ms" | head -12
  echo "$mode: exit status ${PIPESTATUS[0]}"
done
timeout 200 python -m pytest -q -m gpu tests/train/test_stepper.py 2>&1 | tail -2

# Call 2 (the machine of call 1; run inline as here, before --shapes existed): the same step with 240 sequences,
# which epoch_batches cuts into 9 batches, so the 16 warm-up steps met every shape the 30 timed steps cycle over.
# (Call 1's first attempt failed at once without the gguf wheel: call1.sh now installs it.)
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python benchmarks/train_step.py --seqs 240 --warmup 16 --steps 30 --profile 2 --out $OUT/ttt5-warm 2>&1 | grep -v -i warn | head -14

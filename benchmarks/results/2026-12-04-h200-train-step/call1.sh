# Call 1: the trainer's optimizer step timed and profiled at SmolLM2-135M's shape (random weights, synthetic
# data: benchmarks/train_step.py), the shipped recipe's EAGLE-3 head (8,192-token draft vocabulary, 5 unrolled
# steps, 16,384 padded tokens a batch), then with 1 unrolled step (what the later steps cost). As it ran: 1,200
# sequences cut into 44 batches, 10 warm-up steps, so most timed steps met a new batch shape (before --shapes).
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python benchmarks/train_step.py --steps 40 --profile 3 --out $OUT/ttt5 2>&1 | grep -v Warn
python benchmarks/train_step.py --steps 40 --ttt-steps 1 --out $OUT/ttt1 2>&1 | grep -v Warn

# Call 1 (carries the first part of the GGUF's xz stream, .stage/p1): the start-up cost probe (random-weight
# SmolLM2 + builtin:smollm2, no GGUF): the engine's start-up table, then each greedy (S, bs) graph captured
# again and its first three replays timed one by one.
R=benchmarks/results/2026-12-03-h200-double-data
source benchmarks/device/env.sh
python -c "import torch, triton; print(torch.__version__, triton.__version__)"
timeout 200 python benchmarks/startup_costs.py --sizes 1,8,24 --out $OUT/startup 2>&1 | grep -v Warn | tail -40

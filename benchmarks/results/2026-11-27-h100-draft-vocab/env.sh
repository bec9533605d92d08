# sourced by every call: wheels, paths, where the staged GGUF parts go
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c UPDRAFT_EVAL_DIR=/tmp/c/eagle-eval PYTHONUNBUFFERED=1
mkdir -p /tmp/c
GGUF=/tmp/c/SmolLM2-135M-Instruct.Q4_1.gguf
R=benchmarks/results/2026-11-27-h100-draft-vocab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

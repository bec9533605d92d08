# sourced by every call: wheels, paths, where the staged GGUF parts go, the base code
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c UPDRAFT_EVAL_DIR=/tmp/c/eagle-eval PYTHONUNBUFFERED=1
mkdir -p /tmp/c
GGUF=/tmp/c/SmolLM2-135M-Instruct.Q4_1.gguf
R=benchmarks/results/2026-11-27-h100-iteration-launches
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# the code before this folder's change (git archive of 12a23bf's updraft/ and benchmarks/, heads from this tree)
if [ -f .stage/base/base.tar.gz ] && [ ! -d /tmp/base/updraft ]; then
  mkdir -p /tmp/base && tar xzf .stage/base/base.tar.gz -C /tmp/base && ln -sfn $PWD/updraft/heads /tmp/base/updraft/heads
fi

# sourced by every call: paths; "base" is HEAD before this folder's change (git archive of its
# updraft/ and benchmarks/, .stage/base/base.tar.gz); configs tuned here go to /tmp/c
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c UPDRAFT_EVAL_DIR=/tmp/c/eagle-eval PYTHONUNBUFFERED=1
mkdir -p /tmp/c /tmp/empty
R=benchmarks/results/2026-11-27-h100-split-rows
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ -f .stage/base/base.tar.gz ] && [ ! -d /tmp/base/updraft ]; then
  mkdir -p /tmp/base && tar xzf .stage/base/base.tar.gz -C /tmp/base && ln -sfn $PWD/updraft/heads /tmp/base/updraft/heads
fi
GGUF=/tmp/c/SmolLM2-135M-Instruct.Q4_1.gguf

#!/usr/bin/env bash
# DeepSeek-V2/V3 on one GPU (H100 or H200): the GPU tests (fp32 parity with transformers on CUDA,
# the bf16 grouped-GEMM expert path inside a real CUDA graph, the engine with real graphs), then
# plain decoding on the random benchmark shapes. Output under $OUT (default ./gpu-deepseek-out):
# tests.log, bench-<shape>/bench.json, run.log.
#
#   bash scripts/gpu_deepseek_check.sh            # tests + random:deepseek-v2-lite + v3-small
#   SHAPES="deepseek-v2-lite" BS=1,8 bash scripts/gpu_deepseek_check.sh
#
# Needs updraft importable (run from the repo root) and pytest, gguf, transformers installed;
# DEVPKGS=DIR adds DIR/* to PYTHONPATH for pure-Python packages carried in (missing ones only).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-deepseek-out}
PY=${PYTHON:-python3}
SHAPES=${SHAPES:-"deepseek-v2-lite deepseek-v3-small"}
BS=${BS:-1,8}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -n "${DEVPKGS:-}" ]; then
  for d in "$DEVPKGS"/*; do
    $PY -c "import $(basename "$d")" 2>/dev/null || PYTHONPATH=$PYTHONPATH:$d
  done
fi
{
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
  $PY -m pytest -q -p no:cacheprovider tests/models/test_deepseek_gpu.py 2>&1 | tail -30
  for shape in $SHAPES; do
    echo "== random:$shape, plain decoding, bf16, bs $BS"
    $PY -m updraft.cli bench --model "random:$shape" --batch-sizes "$BS" --num-prompts 8 --input-len 256 \
      --output-len 64 --max-model-len 2048 --cuda-graph-max-bs 8 --out "$OUT/bench-$shape" 2>&1 | tail -25
  done
} 2>&1 | tee "$OUT/run.log"

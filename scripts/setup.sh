#!/usr/bin/env bash
# Create the virtual environment and install updraft with its test extras.
# torch: a machine that can already import torch (e.g. a CUDA build) keeps it; otherwise we
# install the pinned CPU build (torch==2.13.0), which never pulls CUDA packages.
set -euo pipefail
VENV=${1:-.venv}
STAMP="$VENV/.installed"
if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && [ "$STAMP" -nt scripts/setup.sh ]; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV"
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "[setup] installing torch==2.13.0 (CPU build)"
  $PIP install "torch==2.13.0" 2>&1 | { grep -v "^WARNING: Location" || true; }
fi
echo "[setup] installing updraft and its test dependencies"
$PIP install -e ".[hub,serve,bench,test]" 2>&1 | { grep -v "^WARNING: Location" || true; }
# The GPU machine runs triton 3.6.0 (../shared/gpu.md), this venv whatever torch pulled in (3.9 with
# torch 2.13): what one compiles the other may not (a string-defaulted constexpr, 2026-12-02). The
# kernels' sm_90 compile checks also run under the device's version, from a folder of its own
# (tests/test_device_triton.py).
DEVICE_TRITON=3.6.0
if [ "$(uname -sm)" = "Linux x86_64" ] && [ ! -d "$VENV/triton-device/triton-$DEVICE_TRITON.dist-info" ]; then
  echo "[setup] installing triton==$DEVICE_TRITON (the GPU machine's) into $VENV/triton-device"
  rm -rf "$VENV/triton-device"
  $PIP install --no-deps --target "$VENV/triton-device" "triton==$DEVICE_TRITON" 2>&1 | { grep -v "^WARNING: Location" || true; }
fi
"$VENV/bin/python" -c "import updraft, torch; print(f'[setup] updraft ready (torch {torch.__version__})')"
touch "$STAMP"

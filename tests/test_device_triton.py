"""The kernels compile for sm_90 under the GPU machine's triton too (3.6.0, ``../shared/gpu.md``),
not only under the one this venv imports: on 2026-12-02 a jit helper's string-defaulted
constexpr compiled under triton 3.9 (the CPU's) and failed every GQA decode launch on the GPU
(``benchmarks/results/2026-12-02-h200-mla-early-meta``). ``make setup`` installs that version into
``.venv/triton-device`` (Linux x86_64); each check runs in a subprocess that imports it first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEVICE = Path(sys.prefix) / "triton-device"
CHECKS = ["updraft.ops.compile_check", "updraft.attention.triton_kernels.compile_check", "updraft.spec.compile_check"]


def _device_version() -> str:
    found = sorted(DEVICE.glob("triton-*.dist-info"))
    return found[0].name.removeprefix("triton-").removesuffix(".dist-info") if found else ""


@pytest.fixture(scope="module")
def device_env() -> dict[str, str]:
    """The environment of a process that imports the device's triton (checked once)."""
    version = _device_version()
    assert version, f"{DEVICE} holds no triton: run `make setup` (scripts/setup.sh installs the GPU machine's)"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=os.pathsep.join([str(DEVICE), str(ROOT)]), TRITON_DEFAULT_FP_FUSION="1")
    probe = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__)"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == version, f"the subprocess imported triton {probe.stdout.strip()!r}: {probe.stderr[-400:]}"
    return env


@pytest.mark.skipif(sys.platform != "linux", reason="triton's wheels are Linux x86_64's")
@pytest.mark.parametrize("module", CHECKS, ids=lambda m: m.split(".")[1])
def test_kernels_compile_under_the_device_triton(module: str, device_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-W", "ignore", "-m", module], env=device_env, cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]

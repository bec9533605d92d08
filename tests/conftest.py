"""Shared pytest fixtures."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

# Without a GPU the Triton kernels can only run under the interpreter, and the switch is read when
# a kernel is defined: set it before any test module imports them (collection order would
# otherwise decide). On a CUDA machine it must stay unset (it would interpret every kernel).
try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs a worker per core: one thread each (and
        torch.set_num_threads(1)  # in the servers they start), or the thread pools oversubscribe the cores
        os.environ.setdefault("OMP_NUM_THREADS", "1")
except ImportError:  # pragma: no cover
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
from updraft.ops.interpreter import install as _install_interpreter_speedup  # noqa: E402

_install_interpreter_speedup()  # interpreter only: one language patch per launch, not per helper call


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def compiled_triton() -> None:
    """For GPU test modules (``pytest.mark.usefixtures("compiled_triton")``): skip them where the
    Triton kernels would run under the interpreter, which they do not test."""
    pytest.importorskip("triton")
    from updraft import ops

    if ops.interpreting():
        pytest.skip("TRITON_INTERPRET is set: these tests need compiled kernels")


def _load_benchmark(name: str) -> ModuleType:
    bench_dir = str(BENCHMARKS)
    sys.path.insert(0, bench_dir)
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(bench_dir)
    return module


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[[str], ModuleType]:
    """Factory: ``load_benchmark(name)`` -> ``benchmarks/<name>.py`` loaded afresh as a module
    (registered under its name; the folder on ``sys.path`` while it loads: the scripts import each
    other), for the scripts' smoke tests."""
    return _load_benchmark


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The default model's GGUF (SmolLM2-135M-Instruct Q4_1), downloaded into the updraft cache
    on first use (``$UPDRAFT_CACHE`` or ``~/.cache/updraft``)."""
    from updraft.models.resolve import resolve_model

    return resolve_model("default")


# ---- tiny random checkpoints (transformers writes them, so the layout is the real one) --------
from updraft.testing import tiny_hf_model, write_tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """Factory: ``tiny_checkpoint(arch="llama", tied=False, **config) -> Path`` of a saved HF folder
    (safetensors + tokenizer). Cached per argument set for the session."""
    cache: dict[str, Path] = {}

    def make(arch: str = "llama", tied: bool = False, seed: int = 0, **overrides: object) -> Path:
        key = f"{arch}-{tied}-{seed}-{sorted(overrides.items())}"
        if key not in cache:
            folder = tmp_path_factory.mktemp(f"tiny-{arch}")
            # transformers' shard progress bar would land in the calling test's captured stderr
            with contextlib.redirect_stderr(io.StringIO()):
                tiny_hf_model(arch, tied, seed, **overrides).save_pretrained(folder)
            write_tiny_tokenizer(folder)
            cache[key] = folder
        return cache[key]

    return make


@pytest.fixture(scope="session")
def tiny_hf():  # noqa: ANN201
    """The transformers model behind ``tiny_checkpoint`` (same arguments, same weights)."""
    return tiny_hf_model


# ---- CUDA events and streams faked on a CPU (host work per launch is countable here) ---------
class FakeCuda:
    """What ``fake_cuda`` counts: events made, ``torch.cuda.current_stream`` calls (an event
    recorded without a stream makes one, as the real ``Event.record()`` does), and every
    record as (event, stream). With ``clock`` set (milliseconds, advanced by the test's work)
    a record takes the clock's time and ``elapsed_time`` is the difference; else 1.5 ms."""

    def __init__(self) -> None:
        self.stream = object()  # the one stream current_stream hands out
        self.events = 0
        self.stream_lookups = 0
        self.records: list[tuple[object, object]] = []
        self.busy: set[object] = set()  # events whose work has not run (query() is False)
        self.clock: float | None = None


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """``torch.cuda.Event`` and ``torch.cuda.current_stream`` replaced by counting fakes."""
    import torch

    cuda = FakeCuda()

    class Event:
        def __init__(self, enable_timing: bool = False, **_: object) -> None:
            cuda.events += 1
            self.timing = enable_timing

        def record(self, stream: object = None) -> None:
            if stream is None:
                cuda.stream_lookups += 1
                stream = cuda.stream
            cuda.records.append((self, stream))
            self.at = cuda.clock

        def query(self) -> bool:
            return self not in cuda.busy

        def synchronize(self) -> None:
            cuda.busy.discard(self)

        def elapsed_time(self, end: Event) -> float:
            assert self.timing and end.timing, "elapsed_time needs timing events"
            if cuda.clock is None:
                return 1.5  # milliseconds
            return end.at - self.at

    def current_stream(device: object = None) -> object:
        cuda.stream_lookups += 1
        return cuda.stream

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    return cuda

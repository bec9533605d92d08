"""Engine configuration: frozen dataclasses, one source of defaults, ``validate()`` with clear
errors. The CLI builds its flags from these fields (``updraft.cli``), so a default lives here
and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch

from updraft.errors import UpdraftError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICES = ("auto", "cpu", "cuda")


class ConfigError(UpdraftError):
    """An invalid engine or speculative configuration."""


def _opt(help_text: str, **kw: Any) -> Any:
    """A dataclass field with CLI help text; ``default`` or ``default_factory`` go in ``kw``."""
    return field(metadata={"help": help_text}, **kw)


@dataclass(frozen=True)
class EngineConfig:
    """Everything that shapes an engine instance (not a request)."""

    model: str = _opt("HF folder, .gguf file, hub id, or 'default' (SmolLM2-135M-Instruct)", default="default")
    device: str = _opt("auto (cuda if available), cpu or cuda", default="auto")
    dtype: str = _opt("auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16 or float16", default="auto")
    seed: int = _opt("seed of the engine's random generator (requests without their own seed)", default=0)
    max_model_len: int | None = _opt("context length served (default: the model's)", default=None)
    max_total_tokens: int | None = _opt("KV pool size in tokens (default: from memory)", default=None)
    mem_fraction_static: float = _opt("CUDA: fraction of free GPU memory for weights + KV", default=0.85)
    page_size: int = _opt("KV page size in tokens", default=1)
    max_running_requests: int = _opt("most requests in flight at once (request pool rows)", default=64)
    chunked_prefill_size: int = _opt("most prompt tokens per prefill step (longer prompts are chunked)", default=2048)
    attention_backend: str = _opt("auto (triton on CUDA, torch_native on CPU), torch_native, triton, flex", default="auto")
    disable_cuda_graph: bool = _opt("run every step eagerly", default=False)
    cuda_graph_max_bs: int = _opt("largest batch size captured in a CUDA graph", default=64)
    progress: bool = _opt("show progress bars (loading, capture)", default=True)

    def resolved_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def resolved_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.bfloat16 if self.resolved_device().type == "cuda" else torch.float32
        return DTYPES[self.dtype]

    def validate(self) -> EngineConfig:
        if self.device not in DEVICES:
            raise ConfigError(f"device={self.device!r} is invalid: choose one of {', '.join(DEVICES)}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device='cuda' but no CUDA GPU is available: use --device cpu or auto")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ConfigError(f"dtype={self.dtype!r} is invalid: choose auto, {', '.join(DTYPES)}")
        for name in ("page_size", "max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} is invalid: must be an integer >= 1")
        for name in ("max_model_len", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name}={value!r} is invalid: must be an integer >= 1 or unset")
        if not 0 < self.mem_fraction_static < 1:
            raise ConfigError(f"mem_fraction_static={self.mem_fraction_static!r} is invalid: must be in (0, 1)")
        from updraft.attention import BACKEND_NAMES

        if self.attention_backend != "auto" and self.attention_backend not in BACKEND_NAMES:
            raise ConfigError(
                f"attention_backend={self.attention_backend!r} is invalid: choose auto, {', '.join(BACKEND_NAMES)}"
            )
        return self

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineConfig:
        """Build from keyword arguments, refusing unknown names with the list of known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"unknown engine option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**kwargs).validate()

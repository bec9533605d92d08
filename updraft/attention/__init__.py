"""Attention backends. ``create_backend`` picks one by name; ``resolve_backend_name`` handles auto."""

from __future__ import annotations

import torch

from updraft.attention.base import AttentionBackend, UnsupportedModeError
from updraft.memory.pools import KVPool

BACKEND_NAMES = ("torch_native", "triton", "flex", "mla")


def backend_class(name: str) -> type[AttentionBackend]:
    """Import and return a backend class by name (lazily: triton/flex/mla need GPU-only packages)."""
    if name == "torch_native":
        from updraft.attention.torch_native import TorchNativeBackend

        return TorchNativeBackend
    if name == "triton":
        from updraft.attention.triton_backend import TritonBackend

        return TritonBackend
    if name == "flex":
        from updraft.attention.flex_backend import FlexBackend

        return FlexBackend
    if name == "mla":
        from updraft.attention.mla_backend import MLABackend

        return MLABackend
    raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")


def resolve_backend_name(name: str, device: torch.device, needs_v_layouts: bool = False) -> str:
    """``auto`` -> triton on CUDA, torch_native on CPU; a model whose cache is MLA's latent rows
    (``needs_v_layouts``) -> mla on CUDA (torch_native on CPU)."""
    if name == "auto":
        if device.type != "cuda":
            return "torch_native"
        return "mla" if needs_v_layouts else "triton"
    if name not in BACKEND_NAMES:
        raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")
    return name


def create_backend(
    name: str,
    kv_pool: KVPool,
    req_to_token: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    scale: float | None = None,
) -> AttentionBackend:
    cls = backend_class(name)
    cls.check_device(kv_pool.device)
    return cls(kv_pool, req_to_token, num_heads, num_kv_heads, head_dim, scale)


__all__ = [
    "AttentionBackend",
    "BACKEND_NAMES",
    "UnsupportedModeError",
    "backend_class",
    "create_backend",
    "resolve_backend_name",
]

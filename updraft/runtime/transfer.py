"""Host to device copies that do not stall the overlapped iteration."""

from __future__ import annotations

import torch


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (a host tensor) on ``device`` without the host waiting: a copy from pageable memory
    waits for the work queued before it (the iteration in flight), so on CUDA it goes through
    pinned memory first (the caching host allocator keeps the block until the copy has run)."""
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)

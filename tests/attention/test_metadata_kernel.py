"""The triton backend's one-launch metadata fill against the torch copies it replaces."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
    pytest.skip("needs triton under TRITON_INTERPRET=1 (tests/conftest.py sets it without CUDA)", allow_module_level=True)

from updraft.attention.triton_kernels.metadata import fill  # noqa: E402


@pytest.mark.parametrize("b", [1, 5, 8])
def test_fill_copies_and_clamps_kv_lens(b: int) -> None:
    gen = torch.Generator().manual_seed(b)
    ext = torch.randint(1, 7, (b,), generator=gen, dtype=torch.int32)
    seq = ext + torch.randint(0, 50, (b,), generator=gen, dtype=torch.int32)
    seq[-1] = 1  # a padded graph row: seq_lens 1 < ext
    ext[-1] = 6
    start = torch.arange(b, dtype=torch.int32) * 6
    rows = torch.randint(0, 100, (b,), generator=gen)  # int64
    out = [torch.full((b,), -9, dtype=torch.int32) for _ in range(3)] + [torch.full((b,), -9, dtype=torch.int64),
                                                                         torch.full((b,), -9, dtype=torch.int32)]
    fill(seq, ext, start, rows, *out)
    assert torch.equal(out[0], seq) and torch.equal(out[1], ext) and torch.equal(out[2], start)
    assert torch.equal(out[3], rows)
    assert torch.equal(out[4], (seq - ext).clamp(min=0))
    assert int(out[4][-1]) == 0

"""Fixtures of the draft-head training tests: a tiny fp32 target on CPU (one thread: the
machine is shared) and its teacher-forced data."""

from __future__ import annotations

import pytest
import torch

from updraft.models.loader import load_checkpoint


@pytest.fixture(autouse=True)
def _one_thread():  # noqa: ANN202
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def tiny_target(tiny_checkpoint):  # noqa: ANN001, ANN201
    return load_checkpoint(tiny_checkpoint("llama"), dtype=torch.float32, device="cpu", progress=False)

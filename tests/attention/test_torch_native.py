"""torch_native against the independent float64 reference, every mode x layout x heads x dtype."""

from __future__ import annotations

import pytest
import torch

from updraft.attention.reference import reference_attention
from updraft.batch import REAL_MODES, ForwardMode
from updraft.kit.cases import AttnCase, sweep
from updraft.kit.harness import run_eager

MODES = list(REAL_MODES)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_native_matches_reference(mode: ForwardMode, dtype: str) -> None:
    cases = sweep([mode], dtypes=(dtype,))
    assert len(cases) >= 96
    failures = [r.describe() for r in (run_eager("torch_native", c) for c in cases) if not r.ok]
    assert not failures, f"{len(failures)}/{len(cases)} failed; first: {failures[:3]}"


def test_reference_is_causal_softmax() -> None:
    """Pin the reference itself: a hand computation for one query over two keys."""
    q = torch.tensor([[[1.0, 0.0]]])
    k = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    v = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
    out = reference_attention(q, k, v, scale=1.0)
    w = torch.softmax(torch.tensor([1.0, 0.0], dtype=torch.float64), 0)
    expected = w[0] * torch.tensor([1.0, 2.0], dtype=torch.float64) + w[1] * torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert torch.allclose(out[0, 0], expected)
    # With two queries, the first must not see the second key.
    q2 = torch.randn(2, 1, 2)
    out2 = reference_attention(q2, k, v, scale=1.0)
    assert torch.allclose(out2[0, 0], v[0, 0].double())


def test_harness_catches_wrong_slot() -> None:
    """The poisoned pool makes a kernel that reads one wrong slot fail the tolerance."""
    from updraft.kit import harness

    case = AttnCase(ForwardMode.DECODE, 4, 1, 32, 1, (17,), (1,), "float32", "shuffled")
    setup = harness.build_case(case)
    from updraft.attention.torch_native import TorchNativeBackend

    backend = TorchNativeBackend(setup.kv_pool, setup.req_to_token, 4, 1, 32)
    batch = harness.make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    batch.attn_metadata.kv_slots[0, 3] += 1  # off-by-one on one position
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    assert not harness.check_output(setup, batch, out, backend.scale).ok

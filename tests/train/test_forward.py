"""The training forward (``updraft.train.forward.unroll``: dense, differentiable, unrolled over
draft steps) equals what the engine computes for the same head: the EXTEND forward over target
features (step 0) and a chain of DRAFT_DECODE steps from any position (steps 1..k) -- so a head
trained on the former serves unchanged in the latter."""

from __future__ import annotations

import pytest
import torch

from updraft.batch import CaptureHidden, FeatureKind, ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.eagle import Eagle3Head
from updraft.runtime.model_runner import ModelRunner
from updraft.train.forward import head_logits, unroll
from updraft.train.heads import new_head

N = 23  # tokens in the sequence
STEPS = 4


def _randomise(head: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def _engine_side(head, ids: torch.Tensor, feature: torch.Tensor, j: int, steps: int):  # noqa: ANN001, ANN202
    """Engine outputs: EXTEND over positions 0..N-2 (token t[p+1], feature[p]); then a chain of
    ``steps - 1`` DRAFT_DECODE forwards from position ``j`` (as the proposer runs them)."""
    pool = ReqToTokenPool(2, N + STEPS + 2, "cpu")
    alloc = PagedAllocator(pool, N + STEPS + 8, 1)
    runner = ModelRunner(head, pool, N + STEPS + 8, 1, "torch_native")
    row = pool.alloc()
    assert alloc.ensure(row, N + STEPS)
    n = N - 1
    batch = runner.make_batch(ForwardMode.EXTEND, ids[1:N], [row], [n], [n], logits="all", capture_hidden=CaptureHidden.FULL)
    batch.set_feature(FeatureKind.TARGET, feature[:n])
    out0 = runner.forward(batch)
    hidden, logits = [out0.hidden[j]], [out0.logits[j]]
    h = out0.hidden[j : j + 1]
    for k in range(1, steps):
        batch = runner.make_batch(
            ForwardMode.DRAFT_DECODE, ids[j + k + 1 : j + k + 2], [row], [j + k + 1], [1], logits="last", stride=1,
            capture_hidden=CaptureHidden.LAST,
        )
        batch.set_feature(FeatureKind.DRAFT, h)
        out = runner.forward(batch)
        h = out.hidden
        hidden.append(h[0])
        logits.append(out.logits[0])
    return hidden, logits, out0


@pytest.mark.parametrize(("method", "layers"), [("eagle", 1), ("eagle3", 1), ("eagle", 2), ("eagle3", 3)])
def test_unroll_equals_engine_extend_and_draft_decode(tiny_target, method: str, layers: int) -> None:  # noqa: ANN001
    target = tiny_target.model
    cfg = target.config
    g = torch.Generator().manual_seed(1)
    draft_ids = torch.randperm(cfg.vocab_size, generator=g)[:150].sort().values if method == "eagle3" else None
    head, _ = new_head(method, target, draft_ids=draft_ids, aux_layers=(0, 0, 1) if method == "eagle3" else None, seed=3,
                       num_layers=layers)
    _randomise(head, 5)
    head.eval()
    ids = torch.randint(0, cfg.vocab_size, (N,), generator=g)
    width = 3 * cfg.hidden_size if method == "eagle3" else cfg.hidden_size
    feature = torch.randn(N, width, generator=g)
    with torch.no_grad():
        outs = unroll(head, ids[None], feature[None], STEPS)
        train_logits = [head_logits(head, o[0]) for o in outs]
    # Step 0 over the whole sequence (rows 0..N-2 are real; the last row has no next token).
    _, _, out0 = _engine_side(head, ids, feature, 0, 1)
    torch.testing.assert_close(outs[0][0, : N - 1], out0.hidden, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(train_logits[0][: N - 1], out0.logits, rtol=1e-5, atol=1e-5)
    # Chains from several positions: step k row j is the k-th draft forward from position j.
    for j in (0, 5, N - STEPS - 1):
        hidden, logits, _ = _engine_side(head, ids, feature, j, STEPS)
        for k in range(STEPS):
            torch.testing.assert_close(outs[k][0, j], hidden[k], rtol=1e-5, atol=1e-5, msg=f"step {k} row {j}")
            torch.testing.assert_close(train_logits[k][j], logits[k], rtol=1e-5, atol=1e-5, msg=f"step {k} row {j}")
    if isinstance(head, Eagle3Head):  # draft-vocabulary logits map back to target ids via d2t
        top = head.to_target_ids(train_logits[0].argmax(-1))
        assert torch.isin(top, draft_ids).all()


def test_unroll_batches_rows_independently(tiny_target) -> None:  # noqa: ANN001
    """Right padding: a padded row's real part gives the same outputs as the sequence alone."""
    target = tiny_target.model
    head, _ = new_head("eagle", target, seed=0)
    _randomise(head, 2)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, target.config.vocab_size, (2, N), generator=g)
    feat = torch.randn(2, N, target.config.hidden_size, generator=g)
    with torch.no_grad():
        both = unroll(head, ids, feat, 3)
        short = unroll(head, ids[1:, :15], feat[1:, :15], 3)
    for k in range(3):
        real = 15 - k - 1  # step k rows whose inputs lie inside the 15 real tokens
        torch.testing.assert_close(both[k][1, :real], short[k][0, :real], rtol=1e-5, atol=1e-5)

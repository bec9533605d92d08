"""Losses: finite, per-step metrics, EAGLE-3's draft-vocabulary handling, and a tiny overfit
that drives them down; the expected accept length formula."""

from __future__ import annotations

import pytest
import torch

from updraft.train.data import TrainBatch
from updraft.train.heads import new_head
from updraft.train.losses import (
    LossConfig,
    TargetHead,
    compute_loss,
    expected_accept_length,
    position_weights,
)


def _batch(target, g: torch.Generator, eagle3: bool) -> TrainBatch:  # noqa: ANN001
    cfg = target.config
    ids = torch.randint(0, cfg.vocab_size, (3, 20), generator=g)
    with torch.no_grad():
        hidden = torch.randn(3, 20, cfg.hidden_size, generator=g)
        argmax = target.compute_logits(hidden.to(target.lm_head_weight.dtype)).argmax(-1)
    mask = torch.zeros(3, 20, dtype=torch.bool)
    mask[:, 4:19] = True
    mask[2, 12:] = False  # a shorter sequence
    feat = torch.randn(3, 20, 3 * cfg.hidden_size, generator=g) if eagle3 else None
    return TrainBatch(ids=ids, hidden=hidden, argmax=argmax, target_mask=mask, feature=feat, size=3)


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_losses_finite_and_overfit(tiny_target, method: str) -> None:  # noqa: ANN001
    target = tiny_target.model
    target.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    draft = torch.arange(0, target.config.vocab_size, 2) if method == "eagle3" else None
    head, _ = new_head(method, target, draft_ids=draft, aux_layers=(0, 0, 1) if method == "eagle3" else None)
    batch = _batch(target, g, method == "eagle3")
    labels = TargetHead(head)
    cfg = LossConfig(steps=2)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    first = None
    for _ in range(40):
        loss, m = compute_loss(head, batch, cfg, labels)
        assert torch.isfinite(loss)
        first = first if first is not None else m
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert set(m) >= {"loss", "acc0", "acc1", "ploss0", "ploss1", "rows0", "rows1"}
    assert m["loss"] < first["loss"] - 0.3
    assert m["acc0"] > first["acc0"] + 0.2
    if method == "eagle":
        assert m["vloss0"] < first["vloss0"]
    else:  # rows whose target token is outside the draft vocabulary are left out
        in_draft = torch.isin(batch.argmax, draft)
        assert m["rows0"] == float((torch.roll(batch.target_mask & in_draft, -1, 1))[:, :-1].sum())
    assert target.model.embed_tokens.weight.grad is None  # the shared target weights stay frozen


def test_gradients_reach_every_head_parameter(tiny_target) -> None:  # noqa: ANN001
    target = tiny_target.model
    target.requires_grad_(False)
    head, _ = new_head("eagle", target)
    loss, _ = compute_loss(head, _batch(target, torch.Generator().manual_seed(1), False), LossConfig(steps=3), TargetHead(head))
    loss.backward()
    missing = [n for n, p in head.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def test_expected_accept_length() -> None:
    assert expected_accept_length({}, 5) == 1.0
    assert expected_accept_length({"acc0": 1.0, "acc1": 1.0}, 3) == 4.0
    assert expected_accept_length({"acc0": 0.5}, 2) == pytest.approx(1 + 0.5 + 0.25)  # later steps reuse the last
    assert expected_accept_length({"acc0": 0.8, "acc1": 0.5}, 2) == pytest.approx(1 + 0.8 + 0.4)


def test_mixed_precision_configuration_runs(tiny_checkpoint) -> None:  # noqa: ANN001
    """The GPU set-up, on CPU: a bf16 target (bf16 embedding, LM head and features), fp32 head
    parameters, bf16 autocast; the loss is finite, gradients are fp32 and reach the head."""
    from updraft.models.loader import load_checkpoint

    target = load_checkpoint(tiny_checkpoint("llama"), dtype=torch.bfloat16, device="cpu", progress=False).model
    target.requires_grad_(False)
    for method in ("eagle", "eagle3"):
        draft = torch.arange(0, target.config.vocab_size, 2) if method == "eagle3" else None
        head, _ = new_head(method, target, draft_ids=draft, aux_layers=(0, 0, 1) if method == "eagle3" else None)
        batch = _batch(target, torch.Generator().manual_seed(2), method == "eagle3")
        batch.hidden = batch.hidden.bfloat16()
        if batch.feature is not None:
            batch.feature = batch.feature.bfloat16()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, m = compute_loss(head, batch, LossConfig(steps=3), TargetHead(head))
        loss.backward()
        assert torch.isfinite(loss) and m["rows2"] > 0
        assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in head.parameters())


def test_position_weights_count_training_positions() -> None:
    mask = torch.tensor([[False, False, True, True, True, False, True], [True] * 7])
    w = position_weights(mask, LossConfig(early_weight=3.0, early_tokens=2))
    assert w is not None and w.dtype == torch.float32
    assert w.tolist() == [[3, 3, 3, 3, 1, 1, 1], [3, 3, 1, 1, 1, 1, 1]]  # prompt positions are never rows
    assert position_weights(mask, LossConfig()) is None


def _frozen_head(tiny_target, method: str, seed: int):  # noqa: ANN001, ANN202
    """A new head over the frozen tiny target (EAGLE-3: every even token as its draft
    vocabulary), a batch, its labels and the draft ids (None for EAGLE-1)."""
    target = tiny_target.model
    target.requires_grad_(False)
    draft = torch.arange(0, target.config.vocab_size, 2) if method == "eagle3" else None
    head, _ = new_head(method, target, draft_ids=draft, aux_layers=(0, 0, 1) if method == "eagle3" else None)
    batch = _batch(target, torch.Generator().manual_seed(seed), method == "eagle3")
    return head, batch, TargetHead(head), draft


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_early_weight_shifts_the_loss_to_the_opening(tiny_target, method: str) -> None:  # noqa: ANN001
    """Weighting every position alike changes nothing; a very large weight on the first 3
    training positions of each sequence gives the loss of those positions alone (one step, so
    the rows are exactly the training positions)."""
    head, batch, labels, _ = _frozen_head(tiny_target, method, seed=2)
    with torch.no_grad():
        plain, _ = compute_loss(head, batch, LossConfig(steps=1), labels)
        same, _ = compute_loss(head, batch, LossConfig(steps=1, early_weight=5.0, early_tokens=1000), labels)
        heavy, _ = compute_loss(head, batch, LossConfig(steps=1, early_weight=1e7, early_tokens=3), labels)
        first = batch.target_mask & (torch.cumsum(batch.target_mask.long(), 1) <= 3)
        alone, _ = compute_loss(head, TrainBatch(batch.ids, batch.hidden, batch.argmax, first, batch.feature, batch.size),
                                LossConfig(steps=1), labels)
    torch.testing.assert_close(same, plain)
    torch.testing.assert_close(heavy, alone, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(alone, plain)


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_hard_labels_are_the_cross_entropy_against_the_target_argmax(tiny_target, method: str) -> None:  # noqa: ANN001
    """``hard_label_weight`` 1 gives the cross-entropy of the head's logits against the target's
    argmax (in the head's columns), computed here from the head's own logits; 0 leaves the soft
    loss alone, and a share in between mixes the two linearly."""
    from updraft.train.forward import head_logits, unroll

    head, batch, labels, draft = _frozen_head(tiny_target, method, seed=3)
    with torch.no_grad():
        soft, ms = compute_loss(head, batch, LossConfig(steps=1), labels)
        hard, mh = compute_loss(head, batch, LossConfig(steps=1, hard_label_weight=1.0), labels)
        mix, _ = compute_loss(head, batch, LossConfig(steps=1, hard_label_weight=0.25), labels)
        out = unroll(head, batch.ids, batch.head_input(), 1)[0]
        rows = torch.roll(batch.target_mask, -1, 1)
        rows[:, -1] = False
        want = torch.roll(batch.argmax, -1, 1)[rows]
        if draft is not None:  # rows whose target argmax the draft vocabulary lacks are left out
            keep = torch.isin(want, draft)
            rows[rows.clone()] = keep
            want = want[keep] // 2  # draft column of target id 2c is c
        logits = head_logits(head, out[rows]).double()
        expect = torch.nn.functional.cross_entropy(logits, want)
    scale = 1.0 if method == "eagle3" else 0.1  # EAGLE-1's token loss weight
    feature = soft - scale * ms["ploss0"]  # EAGLE-1's regression term, 0 for EAGLE-3
    assert mh["hloss0"] == pytest.approx(float(expect), rel=1e-5)
    torch.testing.assert_close(hard, feature + scale * expect.float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mix, feature + scale * (0.75 * ms["ploss0"] + 0.25 * expect.float()), rtol=1e-5, atol=1e-6)
    assert "hloss0" not in ms and mh["acc0"] == ms["acc0"]


def test_resume_keys_added_later_default_to_their_old_value() -> None:
    """A checkpoint written before ``early_weight`` / ``early_tokens`` existed resumes under
    their defaults and is refused under other values."""
    from updraft.train.checkpoint import RESUME_KEYS, _check_keys
    from updraft.train.config import TrainConfig

    cfg = TrainConfig()
    old = {k: getattr(cfg, k) for k in RESUME_KEYS if k not in ("early_weight", "early_tokens")}
    _check_keys("resume_from", old, cfg)
    with pytest.raises(ValueError, match="early_weight=2.0 but the checkpoint was trained with early_weight=1.0"):
        _check_keys("resume_from", old, TrainConfig(early_weight=2.0))


def test_noised_feature_scales_with_each_layers_rms() -> None:
    """Each token's chunk (one per target layer) moves by ``U(-a, a)`` times that chunk's RMS: the
    bound holds per chunk although the chunks' scales differ by 10^4, the scaled noise has the
    uniform's mean 0 and std 1/sqrt(3), and one seed draws the same noise twice."""
    from updraft.train.losses import noised_feature

    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 50, 3, 64, generator=g, dtype=torch.float64) * torch.tensor([1.0, 100.0, 0.01], dtype=torch.float64)[:, None]
    x = x.flatten(-2)
    a = 0.1
    y = noised_feature(x, a, 3, torch.Generator().manual_seed(7))
    assert y.dtype == x.dtype and y.shape == x.shape
    rms = x.unflatten(-1, (3, 64)).pow(2).mean(-1, keepdim=True).sqrt()
    u = (y - x).unflatten(-1, (3, 64)) / (a * rms)
    assert u.abs().max() <= 1 + 1e-5
    for c in range(3):
        assert abs(float(u[..., c, :].mean())) < 0.03
        assert float(u[..., c, :].std()) == pytest.approx(3**-0.5, rel=0.05)
    torch.testing.assert_close(noised_feature(x, a, 3, torch.Generator().manual_seed(7)), y)
    assert not torch.equal(noised_feature(x, a, 3, torch.Generator().manual_seed(8)), y)


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_feature_noise_reaches_only_the_first_steps_input(tiny_target, method: str) -> None:  # noqa: ANN001
    """``feature_noise`` > 0 trains on the noised input feature (EAGLE-3's three-layer feature, or
    EAGLE-1's final hidden state) while the labels stay the clean target's: the loss equals the
    plain loss of a batch whose input alone was noised with the same generator. Amplitude 0
    changes nothing; a positive one without a generator is refused."""
    from updraft.train.losses import noised_feature

    head, batch, labels, _ = _frozen_head(tiny_target, method, seed=4)
    cfg = LossConfig(steps=2, feature_noise=0.2)
    with torch.no_grad():
        plain, _ = compute_loss(head, batch, LossConfig(steps=2), labels)
        zero, _ = compute_loss(head, batch, LossConfig(steps=2, feature_noise=0.0), labels, torch.Generator().manual_seed(1))
        noisy, _ = compute_loss(head, batch, cfg, labels, torch.Generator().manual_seed(1))
        moved = noised_feature(batch.head_input(), 0.2, 3 if method == "eagle3" else 1, torch.Generator().manual_seed(1))
        # a batch's ``feature``, when set, is the head's input (EAGLE-1 reads ``hidden`` otherwise),
        # while the labels come from ``hidden`` either way
        by_hand = TrainBatch(batch.ids, batch.hidden, batch.argmax, batch.target_mask, moved, batch.size)
        expect, _ = compute_loss(head, by_hand, LossConfig(steps=2), labels)
    torch.testing.assert_close(zero, plain)
    assert not torch.allclose(noisy, plain)
    torch.testing.assert_close(noisy, expect)
    with pytest.raises(ValueError, match="noise generator"):
        compute_loss(head, batch, cfg, labels)


def _reference_loss(head, batch: TrainBatch, cfg: LossConfig, labels: TargetHead, outs: list[torch.Tensor]):  # noqa: ANN001, ANN202
    """The loss written position by position in float64: step k's row j is trained against
    position p = j + k + 1 when p is a training position (and, EAGLE-3, its target argmax is in
    the draft vocabulary); soft cross-entropy against the target's distribution, EAGLE-1's
    regression, hard labels and early weights as the module docstring says."""
    from updraft.train.forward import head_logits

    mask = batch.target_mask.clone()
    if labels.in_draft is not None:
        mask &= labels.in_draft[batch.argmax]
    bsz, length = mask.shape
    total, metrics = torch.zeros((), dtype=torch.float64), {}
    for k, out in enumerate(outs):
        num = {"p": 0.0, "h": 0.0, "v": 0.0}
        wsum, hits, n = 0.0, 0, 0
        for b in range(bsz):
            for j in range(length - k - 1):
                p = j + k + 1
                if not mask[b, p]:
                    continue
                n += 1
                before = int(batch.target_mask[b, :p].sum())  # training positions before p
                w = cfg.early_weight if before < cfg.early_tokens else 1.0
                logp = torch.log_softmax(head_logits(head, out[b, j]).double(), -1)
                probs = labels.probs(batch.hidden[b, p]).double()
                col = int(labels.head_index(batch.argmax[b, p]))
                num["p"] += w * float(-(probs * logp).sum())
                num["h"] += w * float(-logp[col])
                num["v"] += w * float(torch.nn.functional.smooth_l1_loss(out[b, j].double(), batch.hidden[b, p].double()))
                wsum += w
                top = int(logp.argmax())
                hits += int((int(labels.draft_ids[top]) if labels.draft_ids is not None else top) == int(batch.argmax[b, p]))
        metrics[f"rows{k}"] = float(n)
        if n == 0:
            continue
        ploss, hloss, vloss = num["p"] / wsum, num["h"] / wsum, num["v"] / wsum
        closs = (1 - cfg.hard_label_weight) * ploss + cfg.hard_label_weight * hloss
        step = closs if labels.eagle3 else cfg.token_weight * closs + cfg.feature_weight * vloss
        total = total + cfg.step_decay**k * step
        metrics[f"acc{k}"], metrics[f"ploss{k}"] = hits / n, ploss
    return total, metrics


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
@pytest.mark.parametrize("extra", [{}, {"early_weight": 3.0, "early_tokens": 4, "hard_label_weight": 0.3}])
def test_loss_matches_a_position_by_position_float64_reference(tiny_target, method: str, extra: dict) -> None:  # noqa: ANN001
    from updraft.train.forward import unroll

    head, batch, labels, _ = _frozen_head(tiny_target, method, seed=4)
    cfg = LossConfig(steps=3, **extra)
    outs: list[list[torch.Tensor]] = []

    def forward(*a):  # noqa: ANN002, ANN202
        outs.append(unroll(*a))
        return outs[-1]

    with torch.no_grad():
        loss, m = compute_loss(head, batch, cfg, labels, forward=forward)
        want, wm = _reference_loss(head, batch, cfg, labels, outs[0])
    assert float(loss) == pytest.approx(float(want), rel=1e-5)
    for key, value in wm.items():
        assert m[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert all(wm[f"rows{k}"] > 0 for k in range(3))



@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_row_counts_from_the_host_copies_equal_the_devices(tiny_target, method: str) -> None:  # noqa: ANN001
    """A batch carrying host copies of its mask and labels (``DistillData.batch``) counts its rows
    on the host: the same loss and metrics as reading the counts from the tensors themselves."""
    from dataclasses import replace

    head, batch, labels, _ = _frozen_head(tiny_target, method, seed=5)
    with torch.no_grad():
        hosted = replace(batch, host_mask=batch.target_mask.clone(), host_argmax=batch.argmax.to(torch.int32))
        a, ma = compute_loss(head, hosted, LossConfig(steps=3), labels)
        b, mb = compute_loss(head, batch, LossConfig(steps=3), labels)
        stale = replace(hosted, host_mask=hosted.host_mask & (torch.rand(hosted.host_mask.shape) < 0.5))
        _, mc = compute_loss(head, stale, LossConfig(steps=3), labels)
    assert float(a) == float(b) and ma == mb
    assert mc["rows0"] != mb["rows0"]  # the host copies are what is counted

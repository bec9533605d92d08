"""The trainer's optimizer step (``Stepper``): what it reports and trains, and the compiled
forward (``TrainConfig.compile``) training exactly as the eager one across batch shapes."""

from __future__ import annotations

import copy

import pytest
import torch

from updraft.train.config import TrainConfig
from updraft.train.data import TrainBatch
from updraft.train.forward import unroll
from updraft.train.heads import new_head
from updraft.train.losses import compute_loss
from updraft.train.stepper import Stepper


def _batch(target, g: torch.Generator, rows: int, length: int, device: str) -> TrainBatch:  # noqa: ANN001
    h, vocab = target.config.hidden_size, target.config.vocab_size
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    hidden = torch.randn(rows, length, h, generator=g)
    with torch.no_grad():
        argmax = target.compute_logits(hidden.to(device=device, dtype=target.lm_head_weight.dtype)).argmax(-1).cpu()
    mask = torch.zeros(rows, length, dtype=torch.bool)
    mask[:, 3 : length - 1] = True
    mask[-1, length // 2 :] = False  # a shorter sequence
    feat = torch.randn(rows, length, 3 * h, generator=g)
    return TrainBatch(ids, hidden, argmax, mask, feat, rows).map(lambda t: t.to(device))


def _stepper(target, compile_: bool, device: str, precision: str, sdpa: str = "auto") -> Stepper:  # noqa: ANN001
    head, _ = new_head("eagle3", target, draft_ids=torch.arange(0, target.config.vocab_size, 2), aux_layers=(0, 0, 1),
                       seed=3, device=device)
    cfg = TrainConfig(out="unused", method="eagle3", ttt_steps=3, lr=1e-3, compile=compile_, sdpa=sdpa)
    return Stepper.for_head(cfg, head, torch.device(device), precision)


def test_step_trains_the_head_and_reports_its_positions(tiny_target) -> None:  # noqa: ANN001
    target = tiny_target.model
    target.requires_grad_(False)
    stepper = _stepper(target, False, "cpu", "fp32")
    assert stepper.forward is unroll
    before = [p.detach().clone() for p in stepper.params]
    g = torch.Generator().manual_seed(0)
    for i, (rows, length) in enumerate([(3, 20), (2, 31)]):
        batch = _batch(target, g, rows, length, "cpu")
        m = stepper.step(batch, 1e-3, i)
        assert m["tokens"] == float(batch.target_mask.sum())
        assert m["grad_norm"] > 0 and torch.isfinite(torch.tensor(m["loss"]))
        assert {"acc0", "acc1", "acc2"} <= set(m)
    assert all(not torch.equal(a, p) for a, p in zip(before, stepper.params))
    assert all(g["lr"] == 1e-3 for g in stepper.opt.param_groups)


def _sdpa_flags() -> tuple[bool, bool, bool, bool]:
    b = torch.backends.cuda
    return b.cudnn_sdp_enabled(), b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.math_sdp_enabled()


def test_no_cudnn_scope_keeps_cudnn_attention_out_and_trains_alike(tiny_target) -> None:  # noqa: ANN001
    """``sdpa="no-cudnn"``: cuDNN attention off inside the step's scope only (flash, memory-efficient
    and math stay allowed); "auto" leaves PyTorch's choice alone. The two train the same head alike."""
    target = tiny_target.model
    target.requires_grad_(False)
    auto, no_cudnn = _stepper(target, False, "cpu", "fp32"), _stepper(target, False, "cpu", "fp32", "no-cudnn")
    no_cudnn.head.load_state_dict(copy.deepcopy(auto.head.state_dict()))
    outside = _sdpa_flags()
    assert outside[0], "PyTorch's default allows cuDNN attention: the test would show nothing"
    with auto.scope():
        assert _sdpa_flags() == outside
    with no_cudnn.scope():
        assert _sdpa_flags() == (False, True, True, True)
    assert _sdpa_flags() == outside
    g = torch.Generator().manual_seed(2)
    for i, (rows, length) in enumerate([(3, 20), (2, 29)]):
        batch = _batch(target, g, rows, length, "cpu")
        a, b = auto.step(batch, 1e-3, i), no_cudnn.step(batch, 1e-3, i)
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5), i
        assert _sdpa_flags() == outside


def _compare(target, device: str, precision: str, rtol: float) -> None:  # noqa: ANN001
    """Eager and compiled steppers from one head: the same gradients on a batch, then the same
    losses over optimizer steps on batches of three shapes (the compiled forward is dynamic in
    [B, L], one graph for all three). Weights after AdamW are not compared: its update
    normalises each gradient entry, so rounding-level differences in near-zero entries move it by
    up to the learning rate."""
    eager = _stepper(target, False, device, precision)
    compiled = _stepper(target, True, device, precision)
    compiled.head.load_state_dict(copy.deepcopy(eager.head.state_dict()))
    assert compiled.forward is not unroll
    g = torch.Generator().manual_seed(1)
    first = _batch(target, g, 3, 20, device)
    for s in (eager, compiled):
        with s.scope():
            loss, _ = compute_loss(s.head, first, s.loss_cfg, s.labels, None, s.forward)
        loss.backward()
    for (name, p), q in zip(eager.head.named_parameters(), compiled.head.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=rtol, atol=rtol * float(p.grad.abs().max()), msg=name)
    for s in (eager, compiled):
        s.opt.zero_grad(set_to_none=True)
    for i, (rows, length) in enumerate([(3, 20), (2, 33), (4, 17)]):
        batch = _batch(target, g, rows, length, device)
        a, b = eager.step(batch, 1e-3, i), compiled.step(batch, 1e-3, i)
        assert b["loss"] == pytest.approx(a["loss"], rel=rtol), i
        assert b["tokens"] == a["tokens"]


@pytest.mark.slow
def test_compiled_forward_trains_as_the_eager_one_cpu(tiny_target) -> None:  # noqa: ANN001
    """Minutes on a 2-core CPU (Inductor compiles the forward and the backward)."""
    target = tiny_target.model
    target.requires_grad_(False)
    _compare(target, "cpu", "fp32", 1e-4)


def _gpu_target(tiny_checkpoint):  # noqa: ANN001, ANN202
    from updraft.models.loader import load_checkpoint

    target = load_checkpoint(tiny_checkpoint("llama"), dtype=torch.bfloat16, device="cuda", progress=False).model
    target.requires_grad_(False)
    return target


@pytest.mark.gpu
def test_compiled_forward_trains_as_the_eager_one_gpu(tiny_checkpoint) -> None:  # noqa: ANN001
    _compare(_gpu_target(tiny_checkpoint), "cuda", "bf16", 2e-2)  # bf16 autocast: fused and unfused ops round differently


@pytest.mark.gpu
def test_no_cudnn_attention_trains_as_the_default_gpu(tiny_checkpoint) -> None:  # noqa: ANN001
    """On the GPU "auto" runs cuDNN's attention where it applies; "no-cudnn" flash / memory-efficient:
    the same losses over steps on three batch shapes, within bf16 rounding."""
    target = _gpu_target(tiny_checkpoint)
    auto, no_cudnn = _stepper(target, False, "cuda", "bf16"), _stepper(target, False, "cuda", "bf16", "no-cudnn")
    no_cudnn.head.load_state_dict(copy.deepcopy(auto.head.state_dict()))
    g = torch.Generator().manual_seed(4)
    for i, (rows, length) in enumerate([(3, 64), (2, 128), (4, 40)]):
        batch = _batch(target, g, rows, length, "cuda")
        a, b = auto.step(batch, 1e-3, i), no_cudnn.step(batch, 1e-3, i)
        assert b["loss"] == pytest.approx(a["loss"], rel=2e-2), i


def test_a_queued_training_step_waits_on_no_op(tiny_target) -> None:  # noqa: ANN001
    """No op of a training step (loss, backward, clipping, optimizer) has an output whose size or
    value the host must wait for (boolean indexing, nonzero, ``.item()``): on a GPU each would stall
    the host until the work queued before it ran (run M's step made ~25 such waits). The row counts
    come from the batch's host copies and the metrics are read after the step (``metrics()``);
    ``tolist`` on a CPU tensor is outside dispatch, so this counts the waits a refactor could bring back."""
    from torch.utils._python_dispatch import TorchDispatchMode

    waits: list[str] = []
    host_side: set[int] = set()  # AdamW's step counters: CPU tensors on a GPU too, read without a wait

    class Waits(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN002, ANN204
            name = func.overloadpacket.__name__
            bool_index = name.startswith("index") and any(
                isinstance(t, torch.Tensor) and t.dtype == torch.bool
                for a in args if isinstance(a, (list, tuple)) for t in a)
            scalar = name in ("_local_scalar_dense", "item") and id(args[0]) not in host_side
            if name in ("nonzero", "masked_select") or bool_index or scalar:
                waits.append(name)
            return func(*args, **(kwargs or {}))

    target = tiny_target.model
    target.requires_grad_(False)
    stepper = _stepper(target, False, "cpu", "fp32")
    data = _distill_data(target, torch.Generator().manual_seed(5), [16, 30, 21, 12], "cpu")
    stepper.step(data.batch([0, 1], "cpu", True, 8), 1e-3, 0)  # the optimizer's state now exists
    host_side.update(id(s["step"]) for s in stepper.opt.state.values())
    batch = data.batch([1, 2, 3], "cpu", True, 8)
    with Waits():
        launched = stepper.launch(batch, 1e-3, 1)
    assert waits == []
    m = launched.metrics()
    assert m["tokens"] == float(batch.target_mask.sum()) and m["grad_norm"] > 0 and {"acc0", "acc2", "loss"} <= set(m)


def _distill_data(target, g: torch.Generator, lengths: list[int], device: str):  # noqa: ANN001, ANN202
    """Random teacher-forced data of the given sequence lengths (a third of each is prompt)."""
    from updraft.train.data import DistillData

    h, vocab, n = target.config.hidden_size, target.config.vocab_size, sum(lengths)
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.tensor(lengths), 0)
    hidden = torch.randn(n, h, generator=g)
    with torch.no_grad():
        argmax = target.compute_logits(hidden.to(device, target.lm_head_weight.dtype)).argmax(-1)
    data = DistillData(torch.randint(0, vocab, (n,), generator=g), offsets, torch.tensor([max(1, x // 3) for x in lengths]),
                       hidden, argmax.cpu(), torch.randn(n, 3 * h, generator=g))
    return data.to(device)


@pytest.mark.gpu
def test_a_training_step_queues_without_waiting_on_the_gpu_gpu(tiny_checkpoint) -> None:  # noqa: ANN001
    """On the GPU, with CUDA's sync debug mode counting every op that makes the host wait: building
    a batch from data on the GPU and queuing its step wait for nothing (the row counts come from
    the batch's host copies, the metrics go to pinned memory); reading the metrics afterwards works."""
    import warnings

    target = _gpu_target(tiny_checkpoint)
    stepper = _stepper(target, False, "cuda", "bf16")
    data = _distill_data(target, torch.Generator().manual_seed(6), [40, 64, 23, 90, 51], "cuda")
    data.argmax_host()  # copied once per run
    stepper.step(data.batch([0, 1], "cuda", True, 16), 1e-3, 0)  # the optimizer's state now exists
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            launched = stepper.launch(data.batch([2, 3, 4], "cuda", True, 16), 1e-3, 1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message)]
    assert syncs == []
    m = launched.metrics()
    assert m["tokens"] == float(data.batch([2, 3, 4], "cpu", True, 16).target_mask.sum()) and m["loss"] > 0

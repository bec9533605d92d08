"""``benchmarks/split_batch_probe.py`` and ``split_cycle_probe.py`` (issue 12's bs-8 cycle: a batch
split into parts on concurrent streams) on CPU, where a side stream runs in place: each part
forwards its own requests, its logits are the rows the unsplit batch gives those requests, and
the summary's ratios read the unsplit decode step at the same batch size. (``split_cycle_probe.py
--device cpu`` runs its whole path on SmolLM2's shape in ~1 min: too slow for CI; only its argument
check is here.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from updraft.batch import ForwardMode
from updraft.bench.models import random_model
from updraft.runtime.side_stream import SideStream


@pytest.fixture
def probe_model(load_benchmark: Callable[[str], Any]) -> tuple[Any, torch.nn.Module]:
    return load_benchmark("split_batch_probe"), random_model("random:tiny", torch.float32, "cpu").model


@pytest.mark.parametrize("mode", [ForwardMode.DECODE, ForwardMode.TARGET_VERIFY])
def test_parts_give_the_unsplit_batch_rows(probe_model: tuple[Any, torch.nn.Module], mode: ForwardMode) -> None:
    probe, model = probe_model
    width = 6 if mode == ForwardMode.TARGET_VERIFY else 1
    parts = probe.part_batches(model, mode, 16, 8, 4, device="cpu", backend="torch_native")
    batches = [b for _, b in parts]
    with torch.no_grad():
        got = probe.forward_parts(model, batches, [SideStream(torch.device("cpu")) for _ in range(3)])
        (_, whole), = probe.part_batches(model, mode, 16, 8, 1, device="cpu", backend="torch_native")
        whole.input_ids.copy_(torch.cat([b.input_ids for b in batches]))
        want = model(whole).logits
    assert [tuple(g.shape) for g in got] == [(2 * width, model.config.vocab_size)] * 4
    assert not torch.equal(got[0], got[1])  # the parts' ids differ
    torch.testing.assert_close(torch.cat(got), want, rtol=1e-5, atol=1e-5)


def test_part_count_must_divide_the_batch(probe_model: tuple[Any, torch.nn.Module]) -> None:
    probe, model = probe_model
    for parts in (3, 0):
        with pytest.raises(ValueError, match=f"--parts: {parts} does not divide batch size 8"):
            probe.part_batches(model, ForwardMode.DECODE, 16, 8, parts, device="cpu", backend="torch_native")


def test_summary_reads_the_unsplit_decode_step(load_benchmark: Callable[[str], Any]) -> None:
    probe = load_benchmark("split_batch_probe")
    rows = [dict(mode="decode", bs=8, parts=1, replay_ms=t, kernels=183, busy_ms=0.4) for t in (0.70, 0.72, 0.69)]
    rows += [dict(mode="verify", bs=8, parts=2, replay_ms=t, kernels=366, busy_ms=0.9, alone_ms=0.74,
                  same_as_serial=ok) for t, ok in ((0.77, True), (0.84, True), (0.76, False))]
    decode, verify = probe.summarise(rows)
    assert (decode["replay_ms"], decode["over_decode"], decode["rounds"]) == (0.70, 1.0, 3)
    assert verify["replay_ms"] == 0.77 and verify["over_decode"] == pytest.approx(1.1)
    assert verify["alone_ms"] == 0.74 and verify["same_as_serial"] is False  # one round's check failed


def test_cycle_probe_rejects_a_part_count_that_does_not_divide(load_benchmark: Callable[[str], Any],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    probe = load_benchmark("split_cycle_probe")
    with pytest.raises(SystemExit):
        probe.main(["--out", "unused", "--device", "cpu", "--bs", "8", "--parts", "2,3"])
    assert "--parts: every count must divide the batch size 8 (got [2, 3])" in capsys.readouterr().err

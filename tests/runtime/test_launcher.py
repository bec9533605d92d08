"""The launcher of the fused iteration: on CUDA its events are made and its stream resolved once,
never per launch (each was host time per iteration); results are read before their slot is
launched again; the emulator's copy lands only at the wait."""

from __future__ import annotations

import pytest
import torch

from updraft.runtime.launcher import CudaLauncher, EmulatedLauncher, fastest_replay


def test_cuda_launcher_makes_no_event_and_looks_up_no_stream_per_launch(fake_cuda) -> None:  # noqa: ANN001
    launcher = CudaLauncher(torch.device("cpu"), slots=2)
    assert (fake_cuda.events, fake_cuda.stream_lookups) == (6, 1)
    src = torch.arange(6).view(2, 3)
    dst = [torch.zeros(2, 3, dtype=torch.long) for _ in range(2)]
    order: list[str] = []
    for i in range(10):
        fake_cuda.records.clear()
        pending = launcher.launch(i % 2, lambda: order.append("replay"), dst[i % 2], src + i)
        pending.synchronize()
        assert torch.equal(dst[i % 2], src + i)
        assert pending.seconds() == pytest.approx(1.5e-3)
        # start, end, copied: on the launcher's stream, each event once
        assert [s for _, s in fake_cuda.records] == [fake_cuda.stream] * 3
        assert len({id(e) for e, _ in fake_cuda.records}) == 3
    assert order == ["replay"] * 10
    assert (fake_cuda.events, fake_cuda.stream_lookups) == (6, 1), "events or a stream lookup per launch"


def test_cuda_launcher_refuses_results_overwritten_by_a_later_launch(fake_cuda) -> None:  # noqa: ANN001
    launcher = CudaLauncher(torch.device("cpu"), slots=2)
    src, dst = torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long)
    first = launcher.launch(0, lambda: None, dst, src)
    launcher.launch(1, lambda: None, dst, src)
    first.synchronize()  # slot 0 not launched again yet: still first's
    launcher.launch(0, lambda: None, dst, src)
    with pytest.raises(RuntimeError, match="launched again"):
        first.seconds()


def test_emulated_copy_lands_at_the_wait() -> None:
    src, dst = torch.tensor([[1, 2]]), torch.zeros(1, 2, dtype=torch.long)
    pending = EmulatedLauncher().launch(0, lambda: None, dst, src)
    src += 10  # the values the replay left at launch are the ones copied
    assert not dst.any(), "read before the wait must see nothing"
    pending.synchronize()
    assert dst.tolist() == [[1, 2]] and pending.seconds() >= 0.0


def test_fastest_replay_leaves_the_cold_first_replay_out(fake_cuda) -> None:  # noqa: ANN001
    """A graph just captured: its first replay uploads it and runs cold (5 ms), the warm ones
    take 1.3, 1.1 and 1.2 ms. The cost is the fastest warm one, after one untimed replay."""
    fake_cuda.clock = 0.0
    times = iter([5.0, 1.3, 1.1, 1.2])

    def replay() -> None:
        fake_cuda.clock += next(times)

    assert fastest_replay(replay, 3) == pytest.approx(1.1e-3)
    assert next(times, None) is None  # 1 untimed + 3 timed replays
    fake_cuda.clock, times = 0.0, iter([5.0, 1.3])
    assert fastest_replay(replay, 1) == pytest.approx(1.3e-3)

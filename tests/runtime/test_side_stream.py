"""``SideStream``: work forked beside the current stream and joined back, in place off CUDA,
and as edges of a captured CUDA graph on a GPU (a join with no fork before it does nothing:
under a capture, waiting on a stream that took no part in it is an error)."""

from __future__ import annotations

import pytest
import torch

from updraft.runtime.side_stream import SideStream


def _body(side: SideStream, x: torch.Tensor) -> torch.Tensor:
    twice = side.run(lambda: x * 2)
    y = x + 1  # on the current stream, beside the side stream's product
    side.join()
    side.join()  # nothing left to wait for
    return y + twice


def test_runs_in_place_off_cuda() -> None:
    side = SideStream(torch.device("cpu"))
    assert side.stream is None
    side.join()  # no fork yet
    assert torch.equal(_body(side, torch.arange(4.0)), torch.arange(4.0) * 3 + 1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fork_and_join_are_graph_edges() -> None:
    dev = torch.device("cuda")
    side = SideStream(dev)
    x = torch.zeros(1 << 20, device=dev)
    _body(side, x)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        side.join()  # no fork inside this capture: must not touch the side stream
        out = _body(side, x)
    for v in (1.0, 5.0):
        x.fill_(v)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, torch.full_like(x, 3 * v + 1))

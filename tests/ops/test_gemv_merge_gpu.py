"""``gemv_merge.merge_linear_add_norm`` compiled, on CUDA: SmolLM2's and the 8B shape's o_proj
(9 x 64 and 32 x 128 heads) at the token rows the backend hands over, against float64 and the two
launches it replaces; captured in a CUDA graph and replayed many times with PDL (a ticket race
would show as a row that changes or a ticket left non-zero).

    pytest -m gpu tests/ops/test_gemv_merge_gpu.py
"""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.usefixtures("compiled_triton")]
DEV = "cuda"


def _inputs(m: int, heads: int, d: int, n: int, splits: int, seed: int):
    g = torch.Generator(device=DEV).manual_seed(seed)
    mid_o = torch.randn(m, heads, splits, d, generator=g, device=DEV)
    lse = torch.randn(m, heads, splits, generator=g, device=DEV) * 3
    live = torch.randint(1, splits + 1, (m, 1, 1), generator=g, device=DEV)
    dead = torch.arange(splits, device=DEV)[None, None, :] >= live
    lse = lse.masked_fill(dead, float("-inf"))
    mid_o = mid_o.masked_fill(dead[..., None], float("nan"))  # never read
    w = (torch.randn(n, heads * d, generator=g, device=DEV) / math.sqrt(heads * d)).bfloat16()
    res = torch.randn(m, n, generator=g, device=DEV).bfloat16()
    nw = (1 + 0.1 * torch.randn(n, generator=g, device=DEV)).bfloat16()
    return mid_o, lse, w, res, nw


@pytest.mark.parametrize("heads,d,n,m,splits", [(9, 64, 576, 1, 44), (9, 64, 576, 6, 44), (9, 64, 576, 24, 11),
                                                (9, 64, 576, 48, 11), (9, 64, 576, 64, 16), (32, 128, 4096, 16, 8)])
def test_fold_against_float64_and_two_launches(heads: int, d: int, n: int, m: int, splits: int) -> None:
    from updraft.attention.triton_kernels.merge import merge_splits
    from updraft.ops import gemv, gemv_merge

    mid_o, lse, w, res, nw = _inputs(m, heads, d, n, splits, seed=m)
    got = gemv_merge.merge_linear_add_norm(mid_o, lse, w, res, nw, 1e-5)
    fin = torch.isfinite(lse)
    wts = torch.where(fin, torch.exp2(lse.double()), 0.0)
    merged = (wts[..., None] * torch.where(fin[..., None], mid_o.double(), 0.0)).sum(2) / wts.sum(-1, keepdim=True)
    ref = merged.reshape(m, heads * d).bfloat16().double() @ w.double().T + res.double()
    assert ((got.stream.double() - ref).abs().max() / ref.abs().max()).item() <= 1e-2
    x = torch.empty(m, heads, d, dtype=torch.bfloat16, device=DEV)
    merge_splits(mid_o, lse, x)
    two = gemv.linear_add_norm(x.view(m, heads * d), w, res, nw, 1e-5)
    assert ((got.stream.double() - two.stream.double()).abs().max() / ref.abs().max()).item() <= 1e-2
    s = got.stream.double()
    assert torch.allclose(got.sumsq.double().sum(1), (s * s).sum(1), rtol=1e-4)


@pytest.mark.parametrize("m,splits", [(6, 44), (48, 11)])
def test_fold_graph_replays_repeat(m: int, splits: int) -> None:
    """Eight folds back to back in one CUDA graph (each reading the stream the one before wrote,
    PDL between them), replayed 100 times: every replay's output equal bit for bit to the first,
    every ticket at 0 afterwards."""
    from updraft.ops import gemv_merge

    mid_o, lse, w, res, nw = _inputs(m, 9, 64, 576, splits, seed=7)
    gemv_merge.merge_linear_add_norm(mid_o, lse, w, res, nw, 1e-5)  # compiles; tickets allocated

    def chain() -> torch.Tensor:
        stream = res
        for _ in range(8):
            stream = gemv_merge.merge_linear_add_norm(mid_o, lse, w, stream, nw, 1e-5).stream
        return stream

    eager = chain()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain()
    graph.replay()
    torch.cuda.synchronize()
    first = out.clone()
    assert torch.equal(first, eager)
    for _ in range(100):
        graph.replay()
        assert torch.equal(out, first)
    assert int(gemv_merge._ticket_buffer(res.device).abs().sum()) == 0

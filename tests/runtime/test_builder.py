"""The one builder per phase (``ModelRunner.make_batch``): graph and eager batches live in the
runner's phase inputs, so a batch is only valid until the next one of its mode is staged."""

from __future__ import annotations

import pytest
import torch

from updraft.batch import ForwardMode
from updraft.llm import LLM


@pytest.fixture(scope="module")
def runner(tiny_checkpoint):  # noqa: ANN001, ANN201
    llm = LLM(str(tiny_checkpoint("llama")), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4])
    eng = llm.engine
    rows = [eng.req_pool.alloc(), eng.req_pool.alloc()]
    assert eng.allocator.ensure_batch(rows, [16, 16])  # type: ignore[arg-type]
    return eng.runner, rows


@pytest.mark.parametrize("bs", [2, 8])  # 2: a DECODE graph replays; 8 > largest captured: eager
def test_a_batch_staged_over_is_refused(runner, bs: int) -> None:  # noqa: ANN001
    r, rows = runner
    rows = (rows * 4)[:bs]
    first = r.make_batch(ForwardMode.DECODE, [5] * bs, rows, [3] * bs, [1] * bs, stride=1)
    second = r.make_batch(ForwardMode.DECODE, [7] * bs, rows, [4] * bs, [1] * bs, stride=1)
    assert (first.replay_bs is not None) == (bs <= 4)
    with pytest.raises(RuntimeError, match="overwritten"):
        r.forward(first)
    out = r.forward(second)
    assert out.logits.shape[0] == bs and bool(torch.isfinite(out.logits).all())


def test_graph_and_eager_batches_read_the_same_builder_output(runner) -> None:  # noqa: ANN001
    r, rows = runner
    g = r.make_batch(ForwardMode.DECODE, [5, 6], rows, [3, 9], [1, 1], stride=1)
    assert g.replay_bs == 2
    got = (g.input_ids[:2].tolist(), g.positions[:2].tolist(), g.out_cache_loc[:2].tolist(), g.seq_lens[:2].tolist())
    table = r.req_pool.req_to_token
    want = ([5, 6], [2, 8], [int(table[rows[0], 2]), int(table[rows[1], 8])], [3, 9])
    assert got == want
    r.select_graphs(())  # the same batch, eager
    try:
        e = r.make_batch(ForwardMode.DECODE, [5, 6], rows, [3, 9], [1, 1], stride=1)
    finally:
        r.select_graphs(None)
    assert e.replay_bs is None
    assert (e.input_ids.tolist(), e.positions.tolist(), e.out_cache_loc.tolist(), e.seq_lens.tolist()) == want

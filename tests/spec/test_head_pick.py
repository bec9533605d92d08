"""``updraft.spec.head_pick``: a draft LM head's greedy pick without its logits, against the
float64 argmax of the logits, mapped and locked as ``argmax_rows`` does; the slots empty after."""

from __future__ import annotations

import pytest
import torch

from updraft.spec import head_pick as hp
from updraft.spec.head_pick import EMPTY, HeadPick, HeadRows

#: Where the kernels run: compiled on a GPU machine, interpreted elsewhere (tests/conftest.py).
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _case(rows: int, hidden: int, vocab: int, seed: int, device: str = DEV) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x, w = torch.randn(rows, hidden, generator=gen), torch.randn(vocab, hidden, generator=gen) * hidden ** -0.5
    return x.to(device), w.to(device)


def _want(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.double() @ w.double().T).argmax(-1)


@pytest.mark.parametrize("rows,hidden", [(1, 40), (3, 48), (8, 24)])
def test_head_pick_is_the_argmax_of_the_logits(rows: int, hidden: int, launches) -> None:  # noqa: ANN001
    """Interpreted kernels: widths that are and are not a power of two (a second column block),
    a vocabulary that is not a multiple of the tile (masked rows must never win), 1-8 rows."""
    calls = launches(hp, "_pick_kernel")
    x, w = _case(rows, hidden, 200, seed=rows + hidden)
    pick = HeadPick(8, x.device)
    dst = torch.full((rows,), -5, dtype=torch.int64, device=DEV)
    pick(HeadRows(x, w), None, dst)
    assert torch.equal(dst, _want(x, w))
    assert (pick.slot == EMPTY).all()  # emptied for the next step
    again = torch.zeros_like(dst)
    pick(HeadRows(x, w), None, again)
    assert torch.equal(again, dst) and calls == [1, 1]


def test_head_pick_maps_and_locks() -> None:
    """The table as EAGLE-3's offsets (``i + d2t[i]``) and as a token map (``t[i]``), the lock
    taking its rows, a strided destination (a column of the verify block)."""
    x, w = _case(3, 40, 130, seed=7)
    d2t = torch.randint(0, 1000, (130,)).to(DEV)
    block = torch.zeros(3, 4, dtype=torch.int64, device=DEV)
    lock = torch.tensor([-1, 17, -1], device=DEV)
    pick = HeadPick(4, x.device)
    want = _want(x, w)
    pick(HeadRows(x, w), (d2t, True), block[:, 2], lock)
    assert block[:, 2].tolist() == [int(want[0] + d2t[want[0]]), 17, int(want[2] + d2t[want[2]])]
    assert block[:, [0, 1, 3]].eq(0).all()
    dst = torch.zeros(3, dtype=torch.int64, device=DEV)
    pick(HeadRows(x, w), (d2t, False), dst)
    assert torch.equal(dst, d2t[want])


def test_head_pick_order_ties_and_negative_logits() -> None:
    """Equal best logits pick the smallest index (``torch.argmax``); all-negative logits rank by
    value (the ordered bits' flip below zero)."""
    hidden = 40
    x = torch.ones(2, hidden)
    w = -torch.rand(100, hidden) - 0.5  # every logit negative
    w[3] = w[90] = -0.01  # two equal best rows, far apart (different programs)
    x[1] = -1.0  # row 1: every logit positive, the most negative weight row wins
    w[57] = -2.0
    x, w = x.to(DEV), w.to(DEV)
    dst = torch.zeros(2, dtype=torch.int64, device=DEV)
    HeadPick(2, x.device)(HeadRows(x, w), None, dst)
    assert dst.tolist() == [3, 57]


def test_head_pick_reference_off_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernels do not run (CPU tensors without the interpreter) the torch reference
    does: the same picks."""
    monkeypatch.setattr(hp, "use_triton", lambda t: False)
    monkeypatch.setattr(hp, "_pick_kernel", None)
    x, w = _case(3, 48, 200, seed=3, device="cpu")
    dst = torch.zeros(3, dtype=torch.int64)
    HeadPick(4, x.device)(HeadRows(x, w), None, dst)
    assert torch.equal(dst, _want(x, w))


def test_head_pick_rejects_what_it_does_not_take() -> None:
    x, w = _case(2, 48, 64, seed=1, device="cpu")
    with pytest.raises(ValueError, match="at most"):
        HeadPick(1, x.device)(HeadRows(x, w), None, torch.zeros(2, dtype=torch.int64))
    wide = torch.zeros(4, hp.MAX_HIDDEN + 1)
    with pytest.raises(ValueError, match="width"):
        HeadPick(4, x.device)(HeadRows(torch.zeros(1, hp.MAX_HIDDEN + 1), wide), None, torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="lock"):
        HeadPick(4, x.device)(HeadRows(x, w), None, torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int32))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 8])
def test_head_pick_on_cuda(dtype: torch.dtype, rows: int) -> None:
    """Compiled, at SmolLM2's head (8,192 x 576): fp32 picks the float64 argmax; bf16 a token
    whose float64 logit is within the bf16 logits' rounding of the best; the slots empty, and a
    CUDA graph of two picks (one slot, read and emptied between) replays to the same picks."""
    x, w = _case(rows, 576, 8192, seed=rows, device="cuda")
    x, w = x.to(dtype), w.to(dtype)
    d2t = torch.randint(0, 40000, (8192,), device="cuda")
    logits = x.double() @ w.double().T
    near = logits >= logits.max(-1, keepdim=True).values - (0 if dtype == torch.float32 else 1e-2 * logits.abs().max())
    pick = HeadPick(8, x.device)
    dst = torch.zeros(rows, 2, dtype=torch.int64, device="cuda")
    pick(HeadRows(x, w), None, dst[:, 0])
    torch.cuda.synchronize()
    assert near.gather(1, dst[:, :1]).all() and (pick.slot == EMPTY).all()
    if dtype == torch.float32:
        assert torch.equal(dst[:, 0], logits.argmax(-1))
    want = dst[:, 0] + d2t[dst[:, 0]]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pick(HeadRows(x, w), (d2t, True), dst[:, 1])
        pick(HeadRows(x, w), None, dst[:, 0])
    dst.zero_()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(dst[:, 1], want) and near.gather(1, dst[:, :1]).all() and (pick.slot == EMPTY).all()


@pytest.mark.parametrize("dot", [False, True])
@pytest.mark.parametrize("preload", [False, True])
def test_head_pick_paths_agree(dot: bool, preload: bool) -> None:
    """Both products (rows one after another on FMA units, every row at once on tensor cores) and
    both weight loads (before the PDL wait or after) write the float64 argmax's index."""
    x, w = _case(5, 40, 150, seed=11)
    slot = torch.full((8,), EMPTY, dtype=torch.int64, device=DEV)
    hp.launch_pick(x, w, slot, 32, 2, dot, preload)
    assert torch.equal(0x7FFFFFFF - (slot[:5] & 0xFFFFFFFF), _want(x, w)) and (slot[5:] == EMPTY).all()


@pytest.mark.parametrize("rows", [1, 3])
def test_head_logits_are_the_products(rows: int, launches) -> None:  # noqa: ANN001
    """``head_logits`` (a sampled draft's logits from the pick's launch; interpreted): the float64
    products within float32 rounding, at one row (FMA units) and more (tensor cores, fp32 in IEEE);
    a head wider than ``MAX_HIDDEN`` takes ``F.linear``."""
    calls = launches(hp, "_pick_kernel")
    x, w = _case(rows, 40, 150, seed=21 + rows)
    got = hp.head_logits(HeadRows(x, w))
    want = x.double() @ w.double().T
    assert got.shape == (rows, 150) and got.dtype == x.dtype and calls == [1]
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 1e-5
    wide = torch.randn(2, hp.MAX_HIDDEN + 8)
    ww = torch.randn(16, hp.MAX_HIDDEN + 8)
    assert torch.allclose(hp.head_logits(HeadRows(wide, ww)), wide @ ww.T) and calls == [1]

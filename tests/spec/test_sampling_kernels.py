"""The Triton sampling kernels (``updraft.spec.sampling_kernels``) against their torch references:
``uniform`` bit for bit with ``device_rng.uniform``, ``choose`` with ``choose_reference``.

Without CUDA they run under the Triton interpreter (tests/conftest.py turns it on), one Python
loop iteration per program, so batches stay small."""

from __future__ import annotations

import math

import pytest
import torch

from updraft.spec import device_rng
from updraft.spec import sampling_kernels as sk

DEV = "cuda" if torch.cuda.is_available() else "cpu"
INF = math.inf


def test_kernels_are_what_runs() -> None:
    # Otherwise every comparison below would compare a torch reference with itself.
    assert sk.use_triton(torch.empty(0, device=DEV))


# ---- uniform_row (drawn by read_rows' launch) ---------------------------------------------------
def _uniform(seed: torch.Tensor, offset: torch.Tensor, stream: int, n: int, rows: torch.Tensor | None = None) -> torch.Tensor:
    """The uniforms ``uniform_row`` draws, through the launch that draws them in the iteration:
    row ``b`` from the RNG key at ``rows[b]`` (default ``b``) of the ``seed`` / ``offset`` columns."""
    from updraft.spec.row_io import UniformDraw, read_rows

    rows = rows if rows is not None else torch.arange(seed.shape[0], device=seed.device)
    zeros = torch.zeros(seed.shape[0], dtype=torch.long, device=seed.device)
    got = read_rows(rows, zeros, zeros, draw=UniformDraw(seed, offset, stream, n)).uniforms
    assert got is not None
    return got

@pytest.mark.parametrize("b,n", [(1, 1), (7, 12), (5, 33), (3, 128)])
def test_uniform_is_bit_identical(b: int, n: int) -> None:
    g = torch.Generator().manual_seed(b * 1000 + n)
    # Stream constants 0 and 5 fit an int32 kernel argument; those of 1 and 77 are >= 2**31 (int64).
    for stream in (0, 1, 5, 77):
        seed = torch.randint(0, 1 << 48, (b,), generator=g).to(DEV)
        offset = torch.randint(0, 1 << 40, (b,), generator=g).to(DEV)
        got = _uniform(seed, offset, stream, n)
        want = device_rng.uniform(seed, offset, stream, n)
        assert got.shape == (b, n) and got.dtype == torch.float32
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), f"stream {stream}"
        assert float(got.min()) > 0 and float(got.max()) < 1


def test_uniform_strided_inputs_and_extremes() -> None:
    # Non-contiguous [B] views, negative seeds (arithmetic shift) and the largest int64 values.
    seeds = torch.tensor([[0, 9], [-1, 9], [(1 << 63) - 1, 9], [-(1 << 62), 9]], device=DEV)[:, 0]
    offsets = torch.tensor([[3, 0], [(1 << 62) + 5, 0], [0, 0], [1 << 40, 0]], device=DEV)[:, 0]
    assert not seeds.is_contiguous()
    got = _uniform(seeds, offsets, 3, 12)
    assert torch.equal(got, device_rng.uniform(seeds, offsets, 3, 12))
    # The key whose first draw was exactly 1.0 when the uniforms took 24 bits ((2**24 - 1) + 0.5
    # rounds to 2**24 in float32): 23 bits + 0.5 are exact, so every draw is inside (0, 1).
    seed, offset = torch.tensor([0], device=DEV), torch.tensor([12401933], device=DEV)
    one = _uniform(seed, offset, 0, 1)
    assert torch.equal(one, device_rng.uniform(seed, offset, 0, 1))
    assert 0.0 < float(one) < 1.0



def test_uniform_rows_read_the_table_in_place() -> None:
    """``rows``: row ``b`` draws with the table's entry ``rows[b]`` (RowState.rng's columns),
    repeated rows (padding) included, equal to gathering first."""
    g = torch.Generator().manual_seed(9)
    table = torch.randint(0, 1 << 48, (10, 2), generator=g).to(DEV)
    rows = torch.tensor([4, 0, 0, 9, 2], device=DEV)
    got = _uniform(table[:, 0], table[:, 1], 7, 12, rows=rows)
    want = device_rng.uniform(table[rows, 0], table[rows, 1], 7, 12)
    assert got.shape == (5, 12) and torch.equal(got, want)
    assert torch.equal(got, _uniform(table[rows, 0], table[rows, 1], 7, 12))


# ---- choose ------------------------------------------------------------------------------------
def _rows(b: int, k: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Mixed sampling rows: greedy, top-k, top-p, min-p, all filters off, combinations."""
    # (temp, top_k, top_p, min_p); greedy rows are what the engine passes: temp 1, top_k 1.
    kinds = [
        (1.0, 1, INF, 0.0),
        (0.8, 5, INF, 0.0),
        (1.2, 20, INF, 0.0),
        (0.9, 1000, INF, 0.0),  # top_k beyond K: off
        (0.7, 0, 0.5, 0.0),
        (1.3, 0, 0.9, 0.0),
        (1.0, 0, INF, 0.05),
        (0.6, 0, INF, 0.2),
        (1.0, 0, INF, 0.0),  # all off
        (0.9, 10, 0.9, 0.02),
    ]
    picks = [kinds[i % len(kinds)] for i in range(b)]
    temp = torch.tensor([r[0] for r in picks])
    top_k = torch.tensor([r[1] for r in picks], dtype=torch.long)
    top_p = torch.tensor([r[2] for r in picks])
    min_p = torch.tensor([r[3] for r in picks])
    # Best K of a vocabulary of draft logits, sorted descending, as torch.topk returns them.
    vals = (torch.randn(b, 4 * k, generator=g) * 3).topk(k, dim=-1).values
    u = torch.rand(b, generator=g).clamp(1e-6, 1 - 1e-6)
    return tuple(t.to(DEV) for t in (vals, temp, top_k, top_p, min_p, u))


def _near_boundary(q: torch.Tensor, u: torch.Tensor, rel: float = 1e-5) -> torch.Tensor:
    """[B] bool: rows whose target ``u * total`` is within ``rel`` of a running-sum boundary,
    where float32 and float64 searches may legitimately disagree."""
    c = q.double().cumsum(-1)
    total = c[:, -1:]
    return ((c - u.double()[:, None] * total).abs() <= rel * total).any(-1)


@pytest.mark.parametrize("k", [64, 50])
def test_choose_matches_reference(k: int) -> None:
    g = torch.Generator().manual_seed(k)
    compared = total = 0
    for _ in range(3):
        vals, temp, top_k, top_p, min_p, u = _rows(16, k, g)
        q, pick = sk.choose(vals, temp, top_k, top_p, min_p, u)
        q_ref, pick_ref = sk.choose_reference(vals, temp, top_k, top_p, min_p, u)
        assert q.shape == (16, k) and q.dtype == torch.float32 and pick.dtype == torch.int64
        torch.testing.assert_close(q, q_ref, atol=1e-6, rtol=0)
        torch.testing.assert_close(q.sum(-1), torch.ones(16, device=DEV), atol=1e-5, rtol=0)
        ok = ~_near_boundary(q_ref, u)
        assert torch.equal(pick[ok], pick_ref[ok])
        compared += int(ok.sum())
        total += 16
        greedy = top_k == 1
        assert bool((pick[greedy] == 0).all()) and bool((q[greedy, 0] == 1).all())
        assert bool((q.gather(1, pick[:, None]) > 0).all()) and int(pick.max()) < k
        # The filters did what they say (checked on the reference, which the kernel matches).
        nnz = (q_ref > 0).sum(-1)
        assert bool((nnz[top_k > 0] <= top_k[top_k > 0]).all())
        assert bool((nnz[(top_k == 0) & (top_p == INF) & (min_p == 0)] == k).all())
        assert bool((nnz[(top_p < 1) | (min_p > 0) | ((top_k > 0) & (top_k < k))] < k).all())
    assert compared >= total - 2


def test_choose_applies_a_row_scale() -> None:
    """Candidates without each row's positive factor (``RowScale``: a draft step that left its
    final norm's 1 / rms out) give the distribution and pick of the scaled candidates: the
    kernel reduces the partial sums of squares itself, the reference by ``factor()``."""
    from updraft.models.llama import RowScale

    g = torch.Generator().manual_seed(11)
    vals, temp, top_k, top_p, min_p, u = _rows(16, 64, g)
    sumsq = (torch.rand(16, 9, generator=g) * 50).to(DEV)
    scale = RowScale(sumsq, 576, 1e-5)
    scaled = vals * scale.factor()[:, None]
    q, pick = sk.choose(vals, temp, top_k, top_p, min_p, u, row_scale=scale)
    q_ref, pick_ref = sk.choose_reference(scaled, temp, top_k, top_p, min_p, u)
    q_ref2, pick_ref2 = sk.choose_reference(vals, temp, top_k, top_p, min_p, u, scale)
    assert torch.equal(q_ref, q_ref2) and torch.equal(pick_ref, pick_ref2)
    torch.testing.assert_close(q, q_ref, atol=1e-6, rtol=0)
    ok = ~_near_boundary(q_ref, u)
    assert torch.equal(pick[ok], pick_ref[ok]) and int(ok.sum()) >= 14
    assert not torch.allclose(q_ref, sk.choose_reference(vals, temp, top_k, top_p, min_p, u)[0]), "the scale mattered"


def test_choose_edges_of_u() -> None:
    # u at the ends of the uniforms' range, and 1.0 (a target past every running sum): the pick
    # is the first entry, resp. the last one with q > 0 (never the zero tail).
    g = torch.Generator().manual_seed(7)
    vals, temp, top_k, top_p, min_p, _ = _rows(10, 50, g)
    for u_val in (2.0**-25, 1 - 2.0**-24, 1.0):
        u = torch.full((10,), u_val, device=DEV)
        q, pick = sk.choose(vals, temp, top_k, top_p, min_p, u)
        _, pick_ref = sk.choose_reference(vals, temp, top_k, top_p, min_p, u)
        last = torch.where(q > 0, torch.arange(50, device=DEV), 0).amax(-1)
        assert torch.equal(pick, torch.zeros_like(pick) if u_val < 0.5 else last), u_val
        assert torch.equal(pick_ref, pick), u_val


def test_choose_exact_ties() -> None:
    # Two equal best logits give q = [0.5, 0.5, 0, ...] exactly, so boundaries are hit exactly:
    # u * total == running sum picks the NEXT entry (searchsorted right), and min_p = 1 keeps
    # every entry equal to p_0 (>=, not >).
    vals = torch.tensor([[2.0, 2.0] + [0.0] * 10] * 4, device=DEV)
    temp = torch.ones(4, device=DEV)
    top_k = torch.tensor([2, 2, 0, 0], device=DEV)
    top_p = torch.full((4,), INF, device=DEV)
    min_p = torch.tensor([0.0, 0.0, 1.0, 1.0], device=DEV)
    u = torch.tensor([0.5, 0.25, 0.5, 0.75], device=DEV)
    for fn in (sk.choose, sk.choose_reference):
        q, pick = fn(vals, temp, top_k, top_p, min_p, u)
        assert torch.equal(q[:, :2], torch.full((4, 2), 0.5, device=DEV)) and not bool(
            q[:, 2:].any()
        )
        assert pick.tolist() == [1, 0, 1, 1], fn


def test_choose_picks_follow_q() -> None:
    # One row, many evenly spaced u = (i + 0.5) / N: the share of picks of entry i is within one
    # u-step of q_i per boundary (deterministic, no statistics). N is kept small for the
    # interpreter (one program per row).
    n, k = 1000, 64
    g = torch.Generator().manual_seed(3)
    vals = (torch.randn(1, 4 * k, generator=g) * 2).topk(k, dim=-1).values.to(DEV)

    def rep(x: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.full((n,), x, dtype=dtype, device=DEV)

    u = (torch.arange(n, device=DEV) + 0.5) / n
    q, pick = sk.choose(vals.expand(n, k), rep(0.7), rep(0, torch.long), rep(0.9), rep(0.0), u)
    assert bool((q == q[:1]).all())  # identical rows, identical q
    kept = int((q[0] > 0).sum())
    assert 1 < kept < k  # top-p actually cut the tail, and more than one entry is in play
    freq = torch.bincount(pick, minlength=k).double() / n
    assert float((freq - q[0].double()).abs().max()) <= 2 / n
    assert bool((freq[q[0] == 0] == 0).all())
    _, pick_ref = sk.choose_reference(
        vals.expand(n, k), rep(0.7), rep(0, torch.long), rep(0.9), rep(0.0), u
    )
    assert int((pick != pick_ref).sum()) <= 2


@pytest.mark.parametrize("kernel", [True, False])
def test_choose_packed_params_ids_and_out(kernel: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # As the fused iteration calls it: parameters read in place from columns of one float32
    # table (top_k float32 too), the candidates' ids given, q and the ids written into one
    # draft step's slices of [B, S, K] buffers. Same q and pick as the plain call (kernel),
    # resp. the torch fallback does the same (no Triton).
    monkeypatch.setattr(sk, "use_triton", lambda t: kernel and (t.is_cuda or sk.interpreter_on()))
    b, k, s = 12, 50, 3
    g = torch.Generator().manual_seed(12)
    vals, temp, top_k, top_p, min_p, u = _rows(b, k, g)
    table = torch.stack([temp, top_k.float(), top_p, min_p, torch.zeros_like(temp)], dim=1)  # [B, 5]
    uu = torch.stack([u, u, u], dim=1)  # [B, 3]: u read with stride 3
    ids = torch.stack([torch.randperm(300, generator=g)[:k] for _ in range(b)]).to(DEV)
    q_buf = torch.full((b, s, k), -1.0, device=DEV)
    ids_buf = torch.full((b, s, k), -1, dtype=torch.long, device=DEV)
    q, tok = sk.choose(vals, table[:, 0], table[:, 1], table[:, 2], table[:, 3], uu[:, 1], ids=ids,
                       out=(q_buf[:, 1], ids_buf[:, 1]))
    q_ref, pick_ref = sk.choose(vals, temp, top_k, top_p, min_p, u)
    torch.testing.assert_close(q, q_ref, atol=1e-6, rtol=0)
    assert torch.equal(q_buf[:, 1], q) and torch.equal(ids_buf[:, 1], ids)
    assert bool((q_buf[:, [0, 2]] == -1).all()) and bool((ids_buf[:, [0, 2]] == -1).all())
    assert torch.equal(tok, ids.gather(1, pick_ref[:, None]).squeeze(1))
    # ids without out: only the pick changes
    q2, tok2 = sk.choose(vals, temp, top_k, top_p, min_p, u, ids=ids)
    assert torch.equal(q2, q) and torch.equal(tok2, tok)
    # the pick into a column of a [B, S + 1] block (strided), nothing else of it touched
    block = torch.full((b, s + 1), -1, dtype=torch.long, device=DEV)
    _, tok3 = sk.choose(vals, temp, top_k, top_p, min_p, u, ids=ids, pick_out=block[:, 2])
    assert torch.equal(block[:, 2], tok) and tok3.data_ptr() == block[:, 2].data_ptr()
    assert bool((block[:, [0, 1, 3]] == -1).all())


def test_argmax_rows_matches_torch_and_maps_ids() -> None:
    """The greedy draft pick: first index among ties, NaN above numbers, an all -inf row at 0,
    bf16 and float32 rows, then EAGLE-3's ``id + d2t[id]`` or a token map's ``hot_ids[id]``."""
    from updraft.spec.sampling_kernels import argmax_rows

    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(6, 300, generator=gen).to(dtype)
        x[1, 7] = x[1, 200] = x[1].max() + 1  # a tie: the first wins
        x[2, 50] = float("nan")
        x[3] = float("-inf")
        x[4, 299] = 100.0  # the last column (the tile's tail is masked)
        assert torch.equal(argmax_rows(x), x.argmax(-1)), dtype
    d2t = torch.randint(0, 1000, (300,), generator=gen)
    hot = torch.randperm(5000, generator=gen)[:300]
    ids = x.argmax(-1)
    assert torch.equal(argmax_rows(x, (d2t, True)), ids + d2t[ids])
    assert torch.equal(argmax_rows(x, (hot, False)), hot[ids])
    assert argmax_rows(x[:0]).shape == (0,)
    # into a column of a [B, S + 1] block (strided), nothing else of it touched
    block = torch.full((6, 4), -1, dtype=torch.long)
    got = argmax_rows(x, (d2t, True), out=block[:, 1])
    assert torch.equal(block[:, 1], ids + d2t[ids]) and got.data_ptr() == block[:, 1].data_ptr()
    assert bool((block[:, [0, 2, 3]] == -1).all())
    # locked rows (a strided column of the lookup's [B, S + 1] locks, -1 where free) take the lock,
    # the others their mapped argmax; the torch path the same
    locks = torch.full((6, 4), -1, dtype=torch.long)
    locks[[0, 3, 5], 2] = torch.tensor([7, 123456, 0])
    want = torch.where(locks[:, 2] >= 0, locks[:, 2], ids + d2t[ids])
    assert torch.equal(argmax_rows(x, (d2t, True), out=block[:, 2], lock=locks[:, 2]), want)
    assert torch.equal(block[:, 2], want) and want.tolist()[3] == 123456
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sk, "use_triton", lambda t: False)
        assert torch.equal(argmax_rows(x, (d2t, True), lock=locks[:, 2]), want)
    with pytest.raises(ValueError, match="lock"):
        argmax_rows(x, lock=locks[:4, 2])


def test_argmax_rows_over_long_rows() -> None:
    """A target vocabulary's row (longer than one register tile, read in chunks): ties across
    chunks keep the first, a NaN in a later chunk wins, the maximum in the last chunk's masked
    tail, an all -inf row at 0; the chunked path agrees with torch's argmax."""
    from updraft.spec.sampling_kernels import MAX_TOPK_ROW, argmax_rows

    v = 2 * MAX_TOPK_ROW + 1234
    gen = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(6, v, generator=gen).to(dtype)
        x[0, 5] = x[0, MAX_TOPK_ROW + 7] = x[0].max() + 1  # a tie across chunks: the first wins
        x[1, MAX_TOPK_ROW + 9] = x[1, MAX_TOPK_ROW + 3] = x[1].max() + 1  # a tie inside a later chunk
        x[2, 2 * MAX_TOPK_ROW + 5] = float("nan")
        x[3] = float("-inf")
        x[4, v - 1] = 100.0
        x[5, 0] = 100.0
        got = argmax_rows(x)
        assert torch.equal(got, x.argmax(-1)), (dtype, got, x.argmax(-1))
        assert got.tolist()[:2] == [5, MAX_TOPK_ROW + 3]

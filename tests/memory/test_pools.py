"""Paged KV bookkeeping: random alloc / grow / free / abort sequences keep the pool consistent,
with and without slack pages taken ahead (reclaimed when the free list runs short)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from updraft.memory.pools import KVPool, PagedAllocator, ReqToTokenPool


def make(page: int, pages: int = 12, reqs: int = 4, width: int = 64, ahead: int = 0) -> tuple[ReqToTokenPool, PagedAllocator]:
    rp = ReqToTokenPool(reqs, width, "cpu")
    return rp, PagedAllocator(rp, pages, page, ahead=ahead)


ops = st.lists(
    st.tuples(st.sampled_from(["new", "grow", "grow_all", "free"]), st.integers(0, 7), st.integers(1, 40)),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(page=st.sampled_from([1, 2, 4, 16]), ahead=st.sampled_from([0, 3, 40]), seq=ops)
def test_random_sequences_keep_pool_consistent(page: int, ahead: int, seq: list[tuple[str, int, int]]) -> None:
    rp, alloc = make(page, pages=max(4, 48 // page), ahead=ahead)
    exact = make(page, pages=max(4, 48 // page))[1]  # the same requests without slack
    live: dict[int, int] = {}  # row -> allocated length
    for op, pick, n in seq:
        if op == "new":
            row = rp.alloc()
            if row is None:
                continue
            ok = alloc.ensure(row, n)
            assert exact.ensure(row, n) == ok, "slack changed an allocation decision"
            if ok:
                live[row] = n
            else:
                rp.free(row)
        elif op == "grow" and live:
            row = sorted(live)[pick % len(live)]
            target = live[row] + n
            if target <= rp.width:
                ok = alloc.ensure(row, target)
                assert exact.ensure(row, target) == ok, "slack changed an allocation decision"
                if ok:
                    live[row] = target
        elif op == "grow_all" and live:  # one ensure_batch, as a decode step does
            rows = sorted(live)
            targets = [min(rp.width, live[r] + 1 + (n + r) % 6) for r in rows]
            ok = alloc.ensure_batch(rows, targets)
            assert exact.ensure_batch(rows, targets) == ok, "slack changed an allocation decision"
            if ok:
                live.update(zip(rows, targets))
        elif op == "free" and live:
            row = sorted(live)[pick % len(live)]
            alloc.free(row)
            exact.free(row)
            rp.free(row)
            del live[row]
        alloc.check_consistency()
        assert alloc.num_free_pages == exact.num_free_pages and alloc.used_tokens == exact.used_tokens
        # Every live row maps its positions to distinct slots inside its own pages, never slot 0.
        seen: set[int] = set()
        for row, length in live.items():
            slots = rp.req_to_token[row, :length].tolist()
            assert 0 not in slots
            assert len(set(slots)) == length
            assert not (seen & set(slots))
            seen |= set(slots)
            pos = torch.arange(length)
            slot_t = torch.tensor(slots)
            # positions of one page are consecutive slots inside that page
            assert torch.equal(slot_t % page, pos % page)
    for row in list(live):
        alloc.free(row)
        rp.free(row)
    alloc.check_consistency()
    assert alloc.used_tokens == 0
    assert rp.num_free == rp.max_reqs


def test_slack_is_taken_ahead_and_reclaimed() -> None:
    rp, alloc = make(1, pages=21, reqs=2, ahead=8)  # 20 usable slots
    a, b = rp.alloc(), rp.alloc()
    assert a is not None and b is not None
    assert alloc.ensure(a, 4)
    assert len(alloc._pages[a]) == 12 and alloc.num_free_pages == 16  # 8 slack pages count as free
    table = rp.req_to_token[a].tolist()
    assert alloc.ensure(a, 10) and rp.req_to_token[a].tolist() == table  # grew within slack: no write
    assert alloc.ensure(b, 10)  # 8 free pages + 2 taken from a's slack
    assert alloc.num_free_pages == 0 and not alloc.ensure(b, 11)
    alloc.check_consistency()  # a's reclaimed table entries are zero again
    assert set(rp.req_to_token[a, :10].tolist()).isdisjoint(rp.req_to_token[b, :10].tolist())
    alloc.free(a)
    alloc.free(b)
    alloc.check_consistency()
    assert alloc.used_tokens == 0 and alloc.num_free_pages == 20


def test_ensure_all_or_nothing() -> None:
    rp, alloc = make(4, pages=4)  # 3 usable pages = 12 slots
    a, b = rp.alloc(), rp.alloc()
    assert a is not None and b is not None
    assert alloc.ensure(a, 8)
    before = alloc.num_free_pages
    assert not alloc.ensure_batch([a, b], [8, 8])  # b needs 2 pages, 1 free
    assert alloc.num_free_pages == before
    assert alloc.allocated_len(b) == 0


def test_free_clears_row_and_double_free_raises() -> None:
    rp, alloc = make(1)
    row = rp.alloc()
    assert row is not None
    alloc.ensure(row, 5)
    alloc.free(row)
    assert int(rp.req_to_token[row].abs().sum()) == 0
    rp.free(row)
    with pytest.raises(ValueError, match="freed twice"):
        rp.free(row)


def test_width_is_enforced() -> None:
    rp, alloc = make(1, width=8)
    row = rp.alloc()
    assert row is not None
    with pytest.raises(ValueError, match="8 wide"):
        alloc.ensure(row, 9)


def test_kv_pool_store_and_scratch() -> None:
    pool = KVPool(2, 4, 2, 1, 4, torch.float32, "cpu")
    assert pool.num_slots == 8
    k = torch.randn(3, 1, 4)
    pool.store(1, torch.tensor([2, 5, 7]), k, -k)
    assert torch.equal(pool.k_buffer[1][5], k[1])
    assert torch.equal(pool.v_buffer[1][7], -k[2])
    assert float(pool.k_buffer[0].abs().sum()) == 0.0
    with pytest.raises(ValueError, match="scratch"):
        KVPool(1, 1, 4, 1, 4, torch.float32, "cpu")


def test_shared_kv_pool_reads_v_from_k():
    # MLA's latent cache: V is K's leading columns, stored once.
    pool = KVPool(2, 4, 2, 1, 6, torch.float32, "cpu", v_head_dim=4, shared_kv=True)
    k = torch.arange(12, dtype=torch.float32).view(2, 1, 6)
    pool.store(1, torch.tensor([3, 5]), k, k[..., :4])
    assert torch.equal(pool.v_buffer[1][torch.tensor([3, 5])], k[..., :4])
    assert pool.v_buffer[1].data_ptr() == pool.k_buffer[1].data_ptr()
    assert KVPool.bytes_per_token(2, 1, 6, torch.float32, v_head_dim=4, shared_kv=True) == 2 * 6 * 4
    assert KVPool.bytes_per_token(2, 1, 6, torch.float32, v_head_dim=4) == 2 * 10 * 4
    with pytest.raises(ValueError, match="v_head_dim"):
        KVPool(1, 4, 2, 1, 4, torch.float32, "cpu", v_head_dim=8, shared_kv=True)

"""Scheduler policy: admission in groups while requests decode."""

from __future__ import annotations

import pytest

from updraft.batch import ForwardMode
from updraft.engine.request import Request
from updraft.engine.scheduler import Scheduler
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.sampling_params import SamplingParams


def _scheduler(max_running: int, admit_group: int) -> Scheduler:
    pool = ReqToTokenPool(max_running, 64, "cpu")
    alloc = PagedAllocator(pool, 4096, 1)
    return Scheduler(pool, alloc, max_running, chunk_size=4096, admit_group=admit_group)


def _add(s: Scheduler, n: int, start: int = 0) -> list[Request]:
    reqs = [Request(f"r{start + i}", [1, 2, 3], SamplingParams(max_tokens=8)) for i in range(n)]
    for r in reqs:
        s.add(r)
    return reqs


def _prefill_all(s: Scheduler) -> None:
    """Run prefill steps until every running request decodes."""
    while True:
        b = s.schedule()
        assert b is not None
        if b.mode != ForwardMode.EXTEND:
            return
        for r, n in zip(b.reqs, b.extend_lens):
            r.num_computed += n
            r.in_prefill = r.num_computed < r.seq_len


def _finish(s: Scheduler, reqs: list[Request]) -> None:
    for r in reqs:
        s.release(r)


def test_waiting_requests_start_in_groups_while_others_decode() -> None:
    s = _scheduler(32, 4)
    first = _add(s, 32)
    _prefill_all(s)  # nothing decoded yet: all 32 start at once
    assert all(not r.in_prefill for r in first) and len(s.running) == 32
    _add(s, 10, start=100)
    for k in range(1, 4):  # one, two, three free rows: not enough for a group of 4
        _finish(s, [first[k - 1]])
        assert not s.can_admit()
        b = s.schedule()
        assert b is not None and b.mode == ForwardMode.DECODE and len(b.reqs) == 32 - k
    _finish(s, [first[3]])
    assert s.can_admit()
    b = s.schedule()
    assert b is not None and b.mode == ForwardMode.EXTEND and [r.request_id for r in b.reqs] == ["r100", "r101", "r102", "r103"]


def test_group_shrinks_to_what_waits_and_to_an_eighth_of_the_slots() -> None:
    s = _scheduler(32, 4)
    first = _add(s, 32)
    _prefill_all(s)
    _add(s, 2, start=100)  # only two wait: two free rows are a group
    _finish(s, first[:1])
    assert not s.can_admit()
    _finish(s, first[1:2])
    assert s.can_admit()
    small = _scheduler(8, 4)  # 8 slots: groups of 8 // 8 = 1 (start as soon as a row frees)
    assert small.admit_group == 1
    reqs = _add(small, 8)
    _prefill_all(small)
    _add(small, 3, start=100)
    _finish(small, reqs[:1])
    assert small.can_admit()


@pytest.mark.parametrize("group", [0, -2])
def test_admit_group_must_be_positive(group: int) -> None:
    from updraft.config import ConfigError, EngineConfig

    with pytest.raises(ConfigError, match="admit_group"):
        EngineConfig(admit_group=group).validate()

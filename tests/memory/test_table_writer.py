"""Table writes through reusable staging: the same table as a plain assignment; on CUDA (faked)
no event or stream lookup per write, and a slot whose copy may still be queued is neither
waited for nor rewritten."""

from __future__ import annotations

import torch

from updraft.memory import staging
from updraft.memory.table_writer import TableWriter


def _reference(table: torch.Tensor, rows: list[int], cols: list[int], slots: list[int]) -> None:
    for r, c, s in zip(rows, cols, slots):
        table[r, c] = s


def test_writes_match_a_plain_assignment_and_grow_past_the_staging() -> None:
    table, ref = torch.zeros(5, 700, dtype=torch.int32), torch.zeros(5, 700, dtype=torch.int32)
    writer = TableWriter(table)
    big = staging.MIN_ENTRIES + 37
    writes = [([1, 1, 3], [0, 1, 699], [7, 8, 9]), ([], [], []),
              ([2 + i % 3 for i in range(big)], [i // 3 for i in range(big)], list(range(100, 100 + big))),
              ([3], [699], [0])]
    for rows, cols, slots in writes:
        writer.write(rows, cols, slots)
        _reference(ref, rows, cols, slots)
        assert torch.equal(table, ref)


def test_staged_writes_make_no_event_and_look_up_no_stream(fake_cuda) -> None:  # noqa: ANN001
    table, ref = torch.zeros(4, 64, dtype=torch.int32), torch.zeros(4, 64, dtype=torch.int32)
    writer = TableWriter(table, staged=True)
    assert (fake_cuda.events, fake_cuda.stream_lookups) == (1, 1)
    for k in range(20):
        rows, cols, slots = [1 + k % 3] * 4, list(range(k, k + 4)), [k * 10 + j for j in range(4)]
        writer.write(rows, cols, slots)
        _reference(ref, rows, cols, slots)
    assert torch.equal(table, ref)
    assert (fake_cuda.events, fake_cuda.stream_lookups) == (1, 1), "an event or a stream lookup per write"
    assert len(fake_cuda.records) == 20 and all(s is fake_cuda.stream for _, s in fake_cuda.records)


def test_a_busy_staging_slot_is_neither_waited_for_nor_rewritten(fake_cuda) -> None:  # noqa: ANN001
    """The device does not progress for three writes (their copies queued behind the iteration
    in flight): the ring grows and keeps every staged write; once the copies ran, the ring is
    reused without new events."""
    table = torch.zeros(4, 64, dtype=torch.int32)
    writer = TableWriter(table, staged=True)
    staged: list[list[int]] = []
    for k in range(3):
        writer.write([1 + k], [k], [11 * (k + 1)])
        event, _ = fake_cuda.records[-1]
        fake_cuda.busy.add(event)
        staged.append([(1 + k) * 64 + k, 11 * (k + 1)])
    assert len(fake_cuda.busy) == 3, "the writer waited for a queued copy"
    assert sorted(s.array[:2].tolist() for s in writer._ring._slots) == sorted(staged), "a queued copy's staging was rewritten"
    assert fake_cuda.events == 3
    fake_cuda.busy.clear()
    for k in range(6):
        writer.write([3], [10 + k], [k])
    assert fake_cuda.events == 3 and len(writer._ring._slots) == 3
    assert table[1, 0] == 11 and table[2, 1] == 22 and table[3, 2] == 33 and table[3, 15] == 5

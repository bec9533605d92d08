"""ForwardMode predicates and the seq_lens convention of ForwardBatch."""

from __future__ import annotations

import inspect

import pytest
import torch

from updraft.batch import ForwardMode, make_forward_batch

M = ForwardMode


def test_v2_predicates_need_explicit_argument() -> None:
    for name in ("is_draft_extend", "is_extend_like", "is_fixed_stride", "is_draft"):
        param = inspect.signature(getattr(ForwardMode, name)).parameters["include_v2"]
        assert param.default is inspect.Parameter.empty, f"{name} must not default include_v2"
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
    assert M.DRAFT_EXTEND_V2.is_draft_extend(include_v2=True)
    assert not M.DRAFT_EXTEND_V2.is_draft_extend(include_v2=False)
    assert M.DRAFT_EXTEND.is_draft_extend(include_v2=False)
    assert M.DRAFT_EXTEND_V2.is_extend_like(include_v2=True)
    assert not M.DRAFT_EXTEND_V2.is_decode()
    assert M.TARGET_VERIFY.is_fixed_stride(include_v2=False)
    assert not M.EXTEND.is_fixed_stride(include_v2=True)


def _batch(mode: ForwardMode, seq: list[int], ext: list[int], stride: int = 0):
    table = torch.arange(4 * 32, dtype=torch.int32).reshape(4, 32)
    return make_forward_batch(
        mode,
        torch.zeros(sum(ext), dtype=torch.long),
        torch.tensor([1, 3, 2][: len(seq)]),
        torch.tensor(seq),
        torch.tensor(ext),
        table,
        stride=stride,
    )


def test_positions_and_slots_follow_convention() -> None:
    b = _batch(M.EXTEND, [5, 3], [2, 3])
    b.check_conventions()
    assert b.positions.tolist() == [3, 4, 0, 1, 2]
    # req_to_token[row, pos] with rows 1 and 3
    assert b.out_cache_loc.tolist() == [32 + 3, 32 + 4, 96 + 0, 96 + 1, 96 + 2]
    assert b.logits_indices.tolist() == [1, 4]
    assert b.prefix_lens_cpu().tolist() == [3, 0]


def test_convention_violations_are_caught() -> None:
    b = _batch(M.EXTEND, [5, 3], [2, 3])
    b.seq_lens_cpu = torch.tensor([1, 3], dtype=torch.int32)  # prefix-only style: forgot the extend
    with pytest.raises(AssertionError, match="seq_lens must include"):
        b.check_conventions()
    v = _batch(M.TARGET_VERIFY, [8, 9], [4, 4], stride=4)
    v.check_conventions()
    v.stride = 5
    with pytest.raises(AssertionError, match="fixed stride"):
        v.check_conventions()


def test_padded_rows_clamp_prefix() -> None:
    b = _batch(M.TARGET_VERIFY, [8, 1], [4, 4], stride=4)
    # A padded graph row: seq_lens = fill value 1 < stride; the clamp keeps the prefix at 0.
    b.seq_lens_cpu = torch.tensor([8, 1], dtype=torch.int32)
    assert b.prefix_lens_cpu().tolist() == [4, 0]


def test_padded_rows_pass_the_convention_check_only_when_marked() -> None:
    b = _batch(M.TARGET_VERIFY, [8, 4], [4, 4], stride=4)
    b.seq_lens_cpu = torch.tensor([8, 1], dtype=torch.int32)  # row 1 padded: fill value 1
    with pytest.raises(AssertionError):
        b.check_conventions()
    b.real_batch_size = 1
    b.check_conventions()


def test_logit_rows_gathers_only_a_strict_selection() -> None:
    """``logit_rows``: every row wanted (decode, verify, the v2 draft extend) -> ``x`` itself, no
    gather kernel; the last row per request (EXTEND) -> those rows."""
    x = torch.arange(7 * 3, dtype=torch.float32).view(7, 3)
    last = _batch(M.EXTEND, [5, 9], [3, 4])  # logits="last" by default: rows 2 and 6
    assert torch.equal(last.logit_rows(x), x[[2, 6]])
    every = make_forward_batch(M.TARGET_VERIFY, torch.zeros(6, dtype=torch.long), torch.tensor([1, 3]),
                               torch.tensor([5, 9]), torch.tensor([3, 3]), torch.arange(128, dtype=torch.int32).view(4, 32),
                               logits="all", stride=3)
    y = torch.arange(6 * 3, dtype=torch.float32).view(6, 3)
    assert every.logit_rows(y) is y

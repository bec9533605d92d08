"""N-gram lookup: finds the latest earlier occurrence of the suffix, never the suffix itself."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from updraft.spec.ngram import NgramIndex


def test_continuation_of_earlier_occurrence() -> None:
    idx = NgramIndex(1, 3)
    idx.extend([1, 2, 3, 4, 9, 1, 2, 3])
    drafts, found = idx.propose(3)
    assert found and drafts == [4, 9, 1]


def test_no_match_pads_with_last_token() -> None:
    idx = NgramIndex(2, 3)
    idx.extend([1, 2, 3, 4])
    assert idx.propose(2) == ([4, 4], False)


def test_prefers_longest_suffix() -> None:
    idx = NgramIndex(1, 2)
    # "7" alone last followed by 8, but the 2-gram "5 7" was followed by 6
    idx.extend([5, 7, 6, 0, 7, 8, 5, 7])
    drafts, found = idx.propose(1)
    assert found and drafts == [6]


def brute(tokens: list[int], n_min: int, n_max: int, k: int) -> tuple[list[int], bool]:
    for n in range(min(n_max, len(tokens)), n_min - 1, -1):
        suffix = tokens[-n:]
        for end in range(len(tokens) - 2, n - 2, -1):
            if tokens[end - n + 1 : end + 1] == suffix:
                cont = tokens[end + 1 : end + 1 + k]
                if cont:
                    return cont + [cont[-1]] * (k - len(cont)), True
    return [tokens[-1]] * k, False


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=40), st.integers(1, 3), st.integers(0, 2), st.integers(1, 5))
def test_matches_brute_force(tokens: list[int], n_min: int, extra: int, k: int) -> None:
    idx = NgramIndex(n_min, n_min + extra)
    for i in range(0, len(tokens), 3):  # arrive in chunks, as generation does
        idx.extend(tokens[i : i + 3])
    assert idx.propose(k) == brute(tokens, n_min, n_min + extra, k)


def test_request_histories_follow_the_requests_tokens() -> None:
    """The index is brought in step with prompt + output before each lookup; a shorter sequence
    cuts it back and re-indexes; a released request's index is gone."""
    from updraft.spec.ngram import RequestHistories

    h = RequestHistories(1, 3)
    idx = h.synced("a", [1, 2, 3], [4, 1, 2], 6)
    assert idx.tokens == [1, 2, 3, 4, 1, 2] and idx.propose(2) == ([3, 4], True)
    assert h.synced("a", [1, 2, 3], [4, 1, 2, 3], 7) is idx and idx.tokens[-1] == 3
    assert h.synced("a", [1, 2, 3], [4], 4).tokens == [1, 2, 3, 4]  # shorter: cut back, re-indexed
    assert h.synced("a", [1, 2, 3], [4, 1, 2], 6).propose(2) == ([3, 4], True)
    h.synced("b", [5], [], 1)
    assert len(h) == 2
    h.release("a")
    h.release("a")
    assert len(h) == 1

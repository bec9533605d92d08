"""``SpecStats``: per-position acceptance stays a per-position rate when adaptive S mixes verify
steps of different draft counts."""

from __future__ import annotations

import pytest

from updraft.spec.stats import SpecStats


def test_per_position_rate_counts_only_steps_that_proposed_the_position() -> None:
    s = SpecStats()
    s.record(5, 5)  # every draft accepted
    s.record(5, 3)
    s.record(2, 2)  # a short iteration: positions 2..4 were not proposed, so not rejected either
    s.record(2, 0)
    assert s.accepted_per_pos == [3, 3, 2, 1, 1] and s.proposed_per_pos == [4, 4, 2, 2, 2]
    assert s.per_position_rate() == pytest.approx([0.75, 0.75, 1.0, 0.5, 0.5])
    assert s.mean_accept_length == pytest.approx((10 + 4) / 4)
    merged = SpecStats()
    merged.merge(s)
    merged.merge(s)
    assert merged.per_position_rate() == s.per_position_rate() and merged.proposed_per_pos == [8, 8, 4, 4, 4]
    assert s.as_dict()["proposed_per_position"] == [4, 4, 2, 2, 2]

"""The mutation campaign: every anchor still matches exactly once (the code has not moved
under a mutation), every failure class has one, and in CI a few representative mutations are
applied to a temporary copy and killed -- while a harmless edit survives (the machinery does not
kill everything). The whole campaign is the slow test at the end (and ``updraft kit mutate``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from updraft.kit import mutate
from updraft.kit.mutations import MUTATIONS, Edit, Mutation, by_name

REPO = Path(__file__).resolve().parents[2]


def test_every_anchor_matches_exactly_once() -> None:
    assert mutate.anchor_problems(list(MUTATIONS), REPO) == []


def test_campaign_covers_every_failure_class() -> None:
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names)) and len(names) >= 20
    assert {m.failure_class for m in MUTATIONS} >= {str(c) for c in range(1, 12)} | {"O1", "O2", "O3", "O4"}
    for m in MUTATIONS:
        assert m.targets and m.device in ("cpu", "gpu"), m.name
        assert all(e.anchor != e.replacement for e in m.edits), m.name


def test_every_mutated_file_still_compiles() -> None:
    """In memory: a mutation that breaks the syntax would be "killed" for the wrong reason."""
    for m in MUTATIONS:
        texts: dict[str, str] = {}
        for e in m.edits:
            text = texts.get(e.file) or (REPO / e.file).read_text()
            texts[e.file] = text.replace(e.anchor, e.replacement)
        for f, text in texts.items():
            compile(text, f, "exec")


def test_unknown_names_and_bad_anchors_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown mutation"):
        by_name(["no-such-mutation"])
    bad = Mutation("bad", "-", "missing anchor", (Edit("updraft/batch.py", "no such text", "x"),), ("tests/test_batch.py",))
    assert mutate.anchor_problems([bad], REPO) == ["bad: anchor found 0 times in updraft/batch.py: 'no such text'"]
    (tmp_path / "updraft").mkdir()
    (tmp_path / "updraft" / "batch.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="anchor found 0 times"):
        mutate.apply_mutation(bad, tmp_path)


#: A harmless edit (a comment) that must SURVIVE the kit: the machinery does not kill everything.
NULL = Mutation(
    "null-comment", "-", "a comment changes",
    (Edit("updraft/attention/torch_native.py", "    batch.check_conventions()\n", "    batch.check_conventions()  # harmless\n"),),
    ("kit --backend torch_native --mode DECODE --runner eager --runner graph",),
)
#: One attention-level graph bug, one production-runner bug, one that only the fused iteration's
#: column sees, one eager kernel bug, one caught by a named pytest test.
CI_SUBSET = ("c10-padded-slots-stale", "c7-draft-logits-views", "c10-fused-stale-row-list", "kv-index-off-by-one",
             "greedy-accept-non-prefix")


def test_ci_subset_is_killed_and_a_harmless_edit_survives() -> None:
    chosen = by_name(list(CI_SUBSET)) + [NULL]
    results = {r.mutation.name: r for r in mutate.run_campaign(chosen, "cpu", jobs=2, timeout=300)}
    for name in CI_SUBSET:
        assert results[name].status == "killed", (name, results[name].detail)
    assert results["c10-padded-slots-stale"].killed_by.startswith("kit ")
    assert "draft decode" in results["c7-draft-logits-views"].killed_by
    assert "fused iteration" in results["c10-fused-stale-row-list"].killed_by
    assert "test_greedy_accept" in results["greedy-accept-non-prefix"].killed_by
    assert results["null-comment"].status == "survived", results["null-comment"]
    text = mutate.render(list(results.values()), {"device": "cpu"})
    assert "| `c10-padded-slots-stale` | 10 |" in text and "**survived**" in text


@pytest.mark.slow
def test_full_cpu_campaign_kills_everything(tmp_path: Path) -> None:
    """``updraft kit mutate`` on CPU: every mutation that a CPU can catch is killed."""
    results = mutate.run_campaign(list(MUTATIONS), "cpu", jobs=2, timeout=600)
    ran = [r for r in results if r.status != "not run"]
    assert all(r.mutation.device == "gpu" for r in results if r.status == "not run")
    survivors = [(r.mutation.name, r.status, r.detail) for r in ran if r.status != "killed"]
    assert not survivors, survivors

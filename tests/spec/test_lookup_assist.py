"""The per-phase iteration's lookup assist (``HostLookupAssist``): which rows it replaces, q
one-hot at each lookup in those rows, and in the engine: lossless, more drafts accepted."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.spec.lookup_assist import HostLookupAssist
from updraft.spec.ngram_device import LookupAssist
from updraft.testing import repeating_prompts as prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)  # = conftest.SPEC_GREEDY


@dataclass
class View:
    request_id: str
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)

    @property
    def seq_len(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)


def test_rows_whose_history_repeats_take_the_lookup() -> None:
    reqs = [View("a", [7, 8, 9, 1, 2, 7, 8]), View("b", [1, 2, 3, 4]), View("c", [5, 6, 7, 5, 6, 7, 5, 6])]
    tokens = torch.full((3, 3), 40, dtype=torch.long)
    q = torch.rand(3, 3, 50)
    assist = HostLookupAssist(LookupAssist(1, 3, min_match=2))
    got, got_q = assist.apply(reqs, tokens, q)  # type: ignore[arg-type]
    # a: "7 8" matched (length 2) -> 9 1 2; b: no repeat; c: "5 6" then "7 5 6"? the longest
    # suffix "7 5 6" (length 3) ended at position 4 -> 7 5 6
    assert got.tolist() == [[9, 1, 2], [40, 40, 40], [7, 5, 6]]
    assert torch.equal(tokens, torch.full((3, 3), 40)), "the inputs are never written"
    assert got_q is not None and torch.equal(got_q[1], q[1])
    for b in (0, 2):
        assert torch.equal(got_q[b].sum(-1), torch.ones(3))
        assert torch.equal(got_q[b].argmax(-1), got[b]) and int((got_q[b] > 0).sum()) == 3
    assert (assist.lookups, assist.replaced) == (3, 2)
    # a longer minimum: only c's 3-token repeat qualifies; deterministic drafts keep q None
    got3, none = HostLookupAssist(LookupAssist(1, 3, min_match=3)).apply(reqs, tokens, None)  # type: ignore[arg-type]
    assert none is None and got3.tolist() == [[40, 40, 40], [40, 40, 40], [7, 5, 6]]
    with pytest.raises(ValueError, match="min_match"):
        HostLookupAssist(LookupAssist(1, 3, min_match=0))


def test_per_phase_lookup_assist_is_lossless_and_accepts_more(target, reference, eagle3_head) -> None:  # noqa: ANN001
    """The per-phase path (CPU, no graphs) with the assist on and off: the tiny target repeats
    its text and the random head drafts almost nothing right, so with the assist more drafts are
    accepted; both emit exactly plain greedy's tokens, and finished requests leave no index."""
    ps = prompts(4, seed=21)
    accepted = {}
    for assist in (0, 2):
        cfg = {"method": "eagle3", "draft_model": str(eagle3_head), "num_steps": 3, "adaptive": False,
               "ngram_assist": assist}
        llm = LLM(str(target), device="cpu", progress=False, speculative_config=cfg)
        eng = llm.engine
        assert eng.driver is None and (eng.spec.assist is not None) == bool(assist)
        outs = llm.generate(ps, GREEDY)
        assert [o.outputs[0].token_ids for o in outs] == reference(ps)
        accepted[assist] = eng.spec_stats.num_accepted_tokens
        if assist:
            assert eng.spec.assist.replaced > 0 and len(eng.spec.assist.histories) == 0
    assert accepted[2] > accepted[0] + 10, accepted


def test_standalone_drafts_take_no_assist(target) -> None:  # noqa: ANN001
    llm = LLM(str(target), device="cpu", progress=False,
              speculative_config={"method": "standalone", "model": str(target), "num_speculative_tokens": 3})
    assert llm.engine.spec.assist is None


def test_sampled_per_phase_rows_repeat_with_the_assist(target, eagle3_head) -> None:  # noqa: ANN001
    """Sampled requests on the per-phase path with the assist: seeded runs repeat token for token
    and the assist replaced rows (q one-hot there: the unit test above)."""
    cfg = {"method": "eagle3", "draft_model": str(eagle3_head), "num_steps": 3, "adaptive": False, "ngram_assist": 1}
    p = SamplingParams(temperature=0.8, top_k=6, seed=3, max_tokens=12, ignore_eos=True)
    runs = []
    for _ in range(2):
        llm = LLM(str(target), device="cpu", progress=False, speculative_config=cfg)
        runs.append(llm.generate([list(range(60))] * 2, [p, p]))
        assert llm.engine.spec.assist.replaced > 0
    assert [o.outputs[0].token_ids for o in runs[0]] == [o.outputs[0].token_ids for o in runs[1]]

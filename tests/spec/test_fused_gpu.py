"""The fused EAGLE-3 iteration under real CUDA graphs: its head's fc on a side stream
(``FusedIteration.project_beside``, forked after the verify and joined before the rest of the
draft extend) drafts exactly what the head projecting the target's layers itself drafts,
iteration by iteration, and the outputs equal plain greedy (fp32). Only a GPU shows the fork and
the join as captured graph edges; ``test_fused.py`` runs the same body in place on a CPU."""

from __future__ import annotations

import pytest
import torch

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.spec.fused import FusedIteration
from updraft.testing import repeating_prompts, write_eagle3_head

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("sampled", [False, True])
def test_fc_on_a_side_stream_drafts_the_same(tiny_checkpoint, tmp_path, monkeypatch, dtype: str, sampled: bool) -> None:  # noqa: ANN001
    target = tiny_checkpoint("llama")
    head = write_eagle3_head(tmp_path / "e3", seed=2)
    ps = repeating_prompts(3, seed=21)
    params = (SamplingParams(temperature=0.8, top_p=0.9, seed=5, max_tokens=24, ignore_eos=True) if sampled
              else SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    real_launch = FusedIteration.launch
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def spy(self: FusedIteration, reqs, num_steps: int, sampled_: bool):  # noqa: ANN001, ANN202
        inf = real_launch(self, reqs, num_steps, sampled_)
        torch.cuda.synchronize()  # the replay's buffers hold this iteration's values until the next launch
        g = self.graphs[(num_steps, sampled_, self.bucket(len(reqs)))]
        assert self.drafter is not None
        seen.append((g.ids.clone(), self.drafter.next_hidden[[r.row for r in reqs]].clone()))
        return inf

    monkeypatch.setattr(FusedIteration, "launch", spy)
    runs = []
    for beside in (True, False):
        monkeypatch.setattr(FusedIteration, "project_beside", beside)
        seen.clear()
        llm = LLM(str(target), device="cuda", dtype=dtype, progress=False, cuda_graph_max_bs=4, max_total_tokens=16384,
                  speculative_config={"method": "eagle3", "draft_model": str(head), "num_steps": 3, "adaptive": False})
        assert llm.engine.driver is not None, llm.engine.graph_log
        outs = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
        runs.append((outs, list(seen)))
        del llm
    (outs_a, seen_a), (outs_b, seen_b) = runs
    assert outs_a == outs_b and len(seen_a) == len(seen_b) > 5
    for i, (a, b) in enumerate(zip(seen_a, seen_b)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), f"launch {i}"
    if dtype == "float32" and not sampled:
        plain = LLM(str(target), device="cuda", dtype=dtype, progress=False, disable_cuda_graph=True, max_total_tokens=16384)
        assert outs_a == [o.outputs[0].token_ids for o in plain.generate(ps, params)]

"""MTP drafts under real CUDA graphs (fp32, so outputs must equal plain greedy exactly): random
K = 2 heads on the tiny target through the fused iteration and the per-phase graphs, v1 and v2,
with a batch above the largest captured size (eager fallback) and below it; the function
target's per-position acceptance with every path. The CPU tests (test_mtp.py) run the same
machinery under the graph emulator; this is what only a GPU shows (capture-time restrictions,
the triton backend's kernels, the graph memory pool)."""

from __future__ import annotations

import pytest
import torch

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.testing import repeating_prompts, write_function_target, write_mtp_head

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
#: (draft extend, fused iteration): v1 never runs fused (it needs host accept lengths)
PATHS = [("v2", True), ("v2", False), ("v1", False)]


def llm_on_cuda(target, head, backend: str, version: str, fused: bool, steps: int = 3) -> LLM:  # noqa: ANN001
    cfg = {"method": "mtp", "model": str(head), "num_steps": steps, "draft_extend": version, "adaptive": False}
    return LLM(str(target), device="cuda", dtype="float32", attention_backend=backend, progress=False, cuda_graph_max_bs=4,
               disable_fused_iteration=not fused, max_total_tokens=16384, speculative_config=cfg)


@pytest.mark.parametrize("backend", ["triton", "torch_native"])
def test_mtp_real_graphs_lossless(tiny_checkpoint, tmp_path, backend: str) -> None:  # noqa: ANN001
    target = tiny_checkpoint("llama")
    head = write_mtp_head(tmp_path / "mtp2", num_modules=2)
    plain = LLM(str(target), device="cuda", dtype="float32", attention_backend=backend, progress=False, disable_cuda_graph=True,
                max_total_tokens=16384)
    for bsz in (1, 3, 6):  # 6 > the largest captured batch (4): eager fallback, then graphs as it shrinks
        ps = repeating_prompts(bsz, seed=40 + bsz)
        params = [SamplingParams(temperature=0.0, max_tokens=8 + 4 * i, ignore_eos=True) for i in range(bsz)]
        want = [o.outputs[0].token_ids for o in plain.generate(ps, params)]
        for version, fused in PATHS:
            llm = llm_on_cuda(target, head, backend, version, fused)
            got = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
            assert got == want, (backend, version, fused, bsz)
            eng = llm.engine
            if fused:
                assert eng.driver is not None and eng.driver.launches > 0, eng.graph_log
            print(f"\n{backend} {version} fused={fused} bs {bsz}: {dict(eng.spec.proposer.runner.path_counts)} "  # type: ignore[union-attr]
                  f"{eng.spec.proposer.chain_counts} batch_failures={eng.stats.batch_failures}")  # type: ignore[union-attr]
            assert eng.stats.batch_failures == 0


@pytest.mark.parametrize("backend", ["triton", "torch_native"])
def test_function_target_acceptance_real_graphs(tmp_path, backend: str) -> None:  # noqa: ANN001
    fn = write_function_target(tmp_path / "fn", seed=3)
    head = fn.write_head(tmp_path / "head", (0, 0, 1))
    ps = repeating_prompts(6, seed=7)
    for version, fused in PATHS:
        outs = llm_on_cuda(fn.folder, head, backend, version, fused).generate(ps, GREEDY)
        for p, o in zip(ps, outs):
            assert o.outputs[0].token_ids == fn.continuation(p, GREEDY.max_tokens)
            n = o.metrics["spec"]["num_drafts"]
            assert o.metrics["spec"]["accepted_per_position"] == [n, n, 0], (backend, version, fused)

"""GPU end to end (run on the device): every attention backend drives the whole engine on
SmolLM2-135M like torch_native does, and speculative decoding is lossless on CUDA.

fp32: greedy tokens equal torch_native's (Triton uses IEEE fp32 dots). bf16: the first-step
logits agree within tolerance and the greedy token agreement rate is reported (later tokens may
diverge after a near-tie, which bf16 rounding can flip)."""

from __future__ import annotations

import pytest
import torch

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

CHATS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain what a hash table is.",
    "List three uses of copper.",
    "How do I reverse a list in Python?",
]
BACKENDS = ["torch_native", "triton", "flex"]


@pytest.fixture(scope="module")
def engines(smollm2_gguf):  # noqa: ANN001, ANN201
    cache: dict[tuple[str, str], LLM] = {}

    def get(backend: str, dtype: str) -> LLM:
        key = (backend, dtype)
        if key not in cache:
            cache[key] = LLM(str(smollm2_gguf), device="cuda", dtype=dtype, attention_backend=backend, progress=False, max_total_tokens=32768)
        return cache[key]

    return get


def _prompts(llm: LLM) -> list[list[int]]:
    return [llm.render_chat([{"role": "user", "content": c}]) for c in CHATS]


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_fp32_tokens_equal_torch_native(engines, backend: str) -> None:  # noqa: ANN001
    ref_llm = engines("torch_native", "float32")
    ps = _prompts(ref_llm)
    params = SamplingParams(temperature=0, max_tokens=48)
    ref = [o.outputs[0].token_ids for o in ref_llm.generate(ps, params)]
    got = [o.outputs[0].token_ids for o in engines(backend, "float32").generate(ps, params)]
    assert got == ref


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_bf16_first_logits_and_agreement(engines, backend: str) -> None:  # noqa: ANN001
    ref_llm, llm = engines("torch_native", "bfloat16"), engines(backend, "bfloat16")
    ps = _prompts(ref_llm)
    from updraft.batch import ForwardMode

    for ids in ps:
        outs = []
        for m in (ref_llm, llm):
            eng = m.engine
            row = eng.req_pool.alloc()
            assert row is not None and eng.allocator.ensure(row, len(ids))
            try:
                b = eng.runner.make_batch(ForwardMode.EXTEND, ids, [row], [len(ids)], [len(ids)], logits="last")
                outs.append(eng.runner.forward(b).logits[0])
            finally:
                eng.allocator.free(row)
                eng.req_pool.free(row)
        a, b = outs
        rel = ((a - b).abs().max() / a.abs().max()).item()
        assert rel < 3e-2, f"first-step logits differ: relative {rel:.3e}"
    params = SamplingParams(temperature=0, max_tokens=48)
    ref = [o.outputs[0].token_ids for o in ref_llm.generate(ps, params)]
    got = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
    same = sum(x == y for r, g in zip(ref, got) for x, y in zip(r, g))
    total = sum(min(len(r), len(g)) for r, g in zip(ref, got))
    print(f"\n{backend} bf16 greedy token agreement with torch_native: {same}/{total}")
    assert got[0][:8] == ref[0][:8]


@pytest.mark.parametrize("backend", ["torch_native", "triton"])
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_speculation_is_lossless_on_cuda(smollm2_gguf, engines, backend: str, version: str) -> None:  # noqa: ANN001
    ref_llm = engines(backend, "float32")
    ps = _prompts(ref_llm)
    params = SamplingParams(temperature=0, max_tokens=48)
    ref = [o.outputs[0].token_ids for o in ref_llm.generate(ps, params)]
    spec = LLM(
        str(smollm2_gguf), device="cuda", dtype="float32", attention_backend=backend, progress=False, max_total_tokens=32768,
        speculative_config={"method": "standalone", "model": str(smollm2_gguf), "num_speculative_tokens": 4, "draft_extend": version,
                            "adaptive": False},  # pinned: the point is that every draft is accepted
    )
    outs = spec.generate(ps, params)
    assert [o.outputs[0].token_ids for o in outs] == ref
    stats = spec.engine.spec_stats
    print(f"\nself-draft on cuda/{backend}/{version}: mean accept length {stats.mean_accept_length:.2f}")
    assert stats.mean_accept_length > 4.5  # the target as its own draft accepts (nearly) everything

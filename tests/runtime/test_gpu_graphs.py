"""Real CUDA graphs on the device: kit graph mode per backend x phase x pad style x capture bs,
and the engine with graphs on gives the same tokens as with graphs off (fp32), falling back
correctly above the largest captured batch."""

from __future__ import annotations

import pytest
import torch

from updraft.attention import backend_class
from updraft.batch import ForwardMode
from updraft.kit.cases import AttnCase
from updraft.kit.graph_harness import run_graph
from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
M = ForwardMode


def cases(mode: ForwardMode, dtype: str) -> list[AttnCase]:
    if mode in (M.DECODE, M.DRAFT_DECODE):
        lens = [((17,), (1,)), ((0, 15, 33, 200), (1, 1, 1, 1))]
    elif mode == M.DRAFT_EXTEND:
        lens = [((16,), (3,)), ((0, 17, 5, 120), (4, 1, 2, 6))]
    else:
        lens = [((15,), (6,)), ((0, 16, 33, 300), (6, 6, 6, 6))]
    return [
        AttnCase(mode, 32, 8, 128, page, pre, ext, dtype, layout, seed=i)
        for i, (pre, ext) in enumerate(lens)
        for layout, page in (("shuffled", 1), ("interleaved", 16))
    ]


@pytest.mark.parametrize("backend", ["triton", "torch_native"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_real_graphs_match_eager_and_reference(backend: str, dtype: str) -> None:
    failures, n = [], 0
    for mode in sorted(backend_class(backend).graph_modes):
        for case in cases(mode, dtype):
            for pad in ("fill", "real"):
                for mult in (1, 2, 4):
                    r = run_graph(backend, case, mult, pad, device="cuda")
                    n += 1
                    if not r.ok:
                        failures.append(r.describe())
    print(f"\n{backend} {dtype}: {n - len(failures)}/{n} graph cases ok")
    assert not failures, f"{len(failures)}/{n}: {failures[:3]}"


@pytest.mark.parametrize("backend", ["triton", "torch_native"])
def test_engine_graphs_on_equal_off(smollm2_gguf, backend: str) -> None:  # noqa: ANN001
    chats = ["What is the capital of France?", "Write a haiku about GPUs.", "Explain recursion.", "Name three planets.", "Say hi."]
    params = [SamplingParams(temperature=0, max_tokens=24 + 8 * i) for i in range(len(chats))]
    # plain decoding twice: through the fused device-state step (overlap) and the per-step graphs
    for spec, overlap in ((None, True), (None, False), ({"method": "standalone", "model": str(smollm2_gguf), "num_speculative_tokens": 4}, False),
                          ({"method": "ngram", "num_speculative_tokens": 4}, False)):
        outs = {}
        for graphs in (False, True):
            llm = LLM(str(smollm2_gguf), device="cuda", dtype="float32", attention_backend=backend, progress=False,
                      disable_cuda_graph=not graphs, cuda_graph_max_bs=4, speculative_config=spec, max_total_tokens=32768,
                      disable_overlap=not overlap)
            ps = [llm.render_chat([{"role": "user", "content": c}]) for c in chats]
            outs[graphs] = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
            if graphs:
                counts = llm.engine.runner.path_counts
                print(f"\n{backend} spec={spec and spec['method']} overlap={overlap}: {dict(counts)}")
                if overlap or spec is not None and spec["method"] == "ngram":  # the fused iteration
                    assert llm.engine.driver is not None and llm.engine.driver.launches > 0
                else:
                    assert any(k.endswith(" graph") for k in counts)
                assert any("eager: batch size 5" in k for k in counts)  # 5 > largest captured 4
        assert outs[True] == outs[False]


def test_bf16_first_step_logits_graph_vs_eager(smollm2_gguf) -> None:  # noqa: ANN001
    from updraft.batch import ForwardMode as FM

    res = {}
    for graphs in (False, True):
        llm = LLM(str(smollm2_gguf), device="cuda", dtype="bfloat16", progress=False, disable_cuda_graph=not graphs, cuda_graph_max_bs=8, max_total_tokens=32768)
        eng = llm.engine
        ids = llm.render_chat([{"role": "user", "content": "Tell me about the moon."}])
        row = eng.req_pool.alloc()
        assert row is not None and eng.allocator.ensure(row, len(ids) + 1)
        eng.runner.forward(eng.runner.make_batch(FM.EXTEND, ids, [row], [len(ids)], [len(ids)]))
        b = eng.runner.make_batch(FM.DECODE, [ids[-1]], [row], [len(ids) + 1], [1], stride=1)
        out = eng.runner.forward(b)
        assert out.graph == graphs
        res[graphs] = out.logits[0].float()
    rel = ((res[True] - res[False]).abs().max() / res[False].abs().max()).item()
    assert rel < 2e-2, rel

"""DeepSeek on the GPU: fp32 logits equal transformers' (CPU reference), the bf16 grouped-GEMM
expert path agrees with the per-expert loop and replays in a real CUDA graph, and the engine
with real graphs gives eager's greedy tokens (fp32) and runs in bf16 with every decode step a
graph replay."""

from __future__ import annotations

import random

import pytest
import torch

from updraft.batch import ForwardMode
from updraft.llm import LLM
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models.deepseek_config import MoEShape
from updraft.models.deepseek_moe import StackedExperts
from updraft.models.loader import load_checkpoint
from updraft.runtime.model_runner import ModelRunner
from updraft.sampling_params import SamplingParams

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("transformers")
V3 = dict(n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2, q_lora_rank=48,
          rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=8.0, mscale=1.0, mscale_all_dim=1.0,
                               original_max_position_embeddings=8))


def test_cuda_fp32_logits_match_transformers(tiny_checkpoint, tiny_hf) -> None:  # noqa: ANN001
    ids = torch.randint(0, 256, (1, 28), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = tiny_hf("deepseek_v3", **V3)(ids).logits[0].float().cuda()
    model = load_checkpoint(tiny_checkpoint("deepseek_v3", **V3), dtype=torch.float32, device="cuda", progress=False).model
    pool = ReqToTokenPool(2, 64, "cuda")
    alloc = PagedAllocator(pool, 18, 4)
    runner = ModelRunner(model, pool, 18, 4, "torch_native")
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, 28)
    tokens = ids[0].tolist()
    out = runner.forward(runner.make_batch(ForwardMode.EXTEND, tokens[:12], [row], [12], [12], logits="all"))
    assert (out.logits - ref[:12]).abs().max().item() <= 1e-4
    for t in range(12, 28):
        out = runner.forward(runner.make_batch(ForwardMode.DECODE, [tokens[t]], [row], [t + 1], [1], stride=1))
        assert (out.logits[0] - ref[t]).abs().max().item() <= 1e-4


def test_grouped_mm_bf16_matches_loop_and_replays_in_a_graph() -> None:
    moe = MoEShape(n_routed_experts=64, num_experts_per_tok=6, moe_intermediate_size=256)
    experts = StackedExperts(512, moe).cuda().bfloat16()
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for p in experts.parameters():
            p.normal_(0, 0.05, generator=gen)
    experts.prepare()  # the probe a loaded model runs in post_load
    assert experts.pick_path(6) == "grouped_mm", "torch._grouped_mm should run bf16 on this GPU"
    t = 24
    x = torch.randn(t, 512, device="cuda", dtype=torch.bfloat16, generator=gen)
    ids = torch.stack([torch.randperm(64, device="cuda", generator=gen)[:6] for _ in range(t)])
    w = torch.rand(t, 6, device="cuda", generator=gen)
    with torch.no_grad():
        grouped = experts(x, ids, w)
        experts.path = "loop"
        loop = experts(x, ids, w)
        experts.path = "gather"
        gather = experts(x, ids, w)
        experts.path = "auto"
        assert (grouped.float() - loop.float()).abs().max().item() <= 2e-2 * loop.float().abs().max().item()
        assert (gather.float() - loop.float()).abs().max().item() <= 2e-2 * loop.float().abs().max().item()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            experts(x, ids, w)  # warm-up off the default stream, as graph capture wants
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = experts(x, ids, w)
        ids.copy_(torch.stack([torch.randperm(64, device="cuda", generator=gen)[:6] for _ in range(t)]))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, experts(x, ids, w))


@pytest.mark.parametrize("backend", ["auto", "torch_native"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_engine_real_graphs(tiny_checkpoint, dtype: str, backend: str) -> None:  # noqa: ANN001
    """"auto" serves a latent cache with ``mla`` on CUDA; torch_native is the other backend that can."""
    target = str(tiny_checkpoint("deepseek_v3", **V3))
    rng = random.Random(4)
    ps = [[rng.randrange(256) for _ in range(rng.randrange(4, 40))] for _ in range(6)]
    greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    common = dict(device="cuda", dtype=dtype, progress=False, max_total_tokens=8192, attention_backend=backend)
    graphs = LLM(target, cuda_graph_max_bs=8, **common)
    assert graphs.engine.backend_name == ("mla" if backend == "auto" else backend)
    out = [o.outputs[0].token_ids for o in graphs.generate(ps, greedy)]
    eng = graphs.engine
    assert eng.driver is not None and eng.driver.launches > 0
    assert not any(k.startswith("DECODE") for k in eng.runner.path_counts), eng.runner.path_counts  # fused replays only
    if dtype == "float32":
        eager = LLM(target, disable_cuda_graph=True, **common)
        assert out == [o.outputs[0].token_ids for o in eager.generate(ps, greedy)]

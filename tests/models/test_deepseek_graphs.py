"""A tiny DeepSeek-V3 (MLA latent cache, MoE with noaux_tc routing) in the whole engine: graphs
under the CPU emulator give the same greedy tokens as eager for plain decoding (the overlapped
fused step and the per-step DECODE graphs) and n-gram speculation (TARGET_VERIFY over the
latent cache); the graphs really ran."""

from __future__ import annotations

import random

import pytest

from updraft.llm import LLM
from updraft.models.deepseek_moe import StackedExperts
from updraft.sampling_params import SamplingParams

pytest.importorskip("transformers")
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
V3 = dict(n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2, q_lora_rank=48)


@pytest.mark.parametrize("kind", ["plain", "per-step", "ngram"])
def test_graphs_equal_eager(tiny_checkpoint, kind: str) -> None:  # noqa: ANN001
    target = str(tiny_checkpoint("deepseek_v3", **V3))
    rng = random.Random(4)
    ps = [[rng.randrange(256) for _ in range(rng.randrange(4, 20))] for _ in range(4)]
    ps = [p + p[:6] for p in ps]  # repeats for the n-gram drafter to find
    spec = {"method": "ngram", "num_speculative_tokens": 2, "adaptive": False} if kind == "ngram" else None
    eager = LLM(target, device="cpu", progress=False, speculative_config=spec)
    assert eager.engine.backend_name == "torch_native"
    graphs = LLM(target, device="cpu", progress=False, speculative_config=spec, graph_emulate=True, cuda_graph_max_bs=4,
                 disable_overlap=kind == "per-step")
    ref = [o.outputs[0].token_ids for o in eager.generate(ps, GREEDY)]
    assert [o.outputs[0].token_ids for o in graphs.generate(ps, GREEDY)] == ref
    eng = graphs.engine
    if eng.driver is not None:
        assert eng.driver.launches > 0 and eng.driver.fused.graphs
        assert not eng.runner.path_counts, eng.runner.path_counts  # every decode step was a fused replay
    else:
        assert eng.runner.graph_hit_rate() == 1.0, eng.runner.path_counts
    assert any(isinstance(m, StackedExperts) for m in eng.model.modules())


def test_generate_command_on_a_deepseek_folder(tiny_checkpoint, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    from updraft.cli import main

    folder = str(tiny_checkpoint("deepseek_v3", **V3))
    assert main(["generate", "--model", folder, "--prompt", "hello", "--max-tokens", "6", "--ignore-eos", "--no-progress"]) == 0
    assert "tok/s" in capsys.readouterr().err
    bad = ["generate", "--model", folder, "--prompt", "hi", "--attention-backend", "triton", "--device", "cpu", "--no-progress"]
    assert main(bad) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "torch_native" in err and "\n" not in err

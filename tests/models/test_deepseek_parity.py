"""DeepSeek-V2/V3 logits equal transformers' on tiny random checkpoints (fp32, max |diff| <= 1e-4,
prefill + 16 greedy decode steps, page sizes 1 and 4, torch_native): dense-only and MoE, V2
softmax routing (greedy, group-limited), V3 sigmoid + noaux_tc, with and without q_lora, yarn
RoPE, interleaved and neox rope layouts. Wrong routing rules (mutations of ``route``) must
break the parity, and every expert path must keep it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from updraft.batch import ForwardMode
from updraft.memory.pools import PagedAllocator, ReqToTokenPool
from updraft.models import deepseek_moe
from updraft.models.deepseek_config import MoEShape
from updraft.models.deepseek_moe import StackedExperts
from updraft.models.loader import load_checkpoint
from updraft.runtime.model_runner import ModelRunner

transformers = pytest.importorskip("transformers")

YARN_V2 = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, mscale=1.0, mscale_all_dim=0.5,
               original_max_position_embeddings=16, beta_fast=32, beta_slow=1)
YARN_V3 = dict(rope_type="yarn", rope_theta=10000.0, factor=8.0, mscale=1.0, mscale_all_dim=1.0,
               original_max_position_embeddings=8)
# 16 experts in 4 groups of 4, 3 per token, 2 groups kept: group limits and the bias matter.
ROUTED = dict(n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2)

CASES: dict[str, tuple[str, dict]] = {
    "v2-dense": ("deepseek_v2", dict(first_k_dense_replace=3)),
    "v2-greedy-yarn": ("deepseek_v2", dict(rope_parameters=YARN_V2)),
    "v2-grouped-qlora": ("deepseek_v2", dict(ROUTED, topk_method="group_limited_greedy", q_lora_rank=48, routed_scaling_factor=2.0)),
    "v3-noaux-qlora-yarn": ("deepseek_v3", dict(ROUTED, q_lora_rank=48, rope_parameters=YARN_V3)),
    "v3-neox-unnormed": ("deepseek_v3", dict(rope_interleave=False, norm_topk_prob=False, routed_scaling_factor=1.5)),
}
PROMPT, STEPS = 12, 16


def _ids() -> torch.Tensor:
    return torch.randint(0, 256, (1, PROMPT + STEPS), generator=torch.Generator().manual_seed(3))


_REFERENCE: dict[str, torch.Tensor] = {}


def _reference(tiny_hf, case: str) -> torch.Tensor:  # noqa: ANN001
    """transformers' logits over the whole prompt + decode tokens (one forward; cached)."""
    if case not in _REFERENCE:
        arch, over = CASES[case]
        with torch.no_grad():
            _REFERENCE[case] = tiny_hf(arch, **over)(_ids()).logits[0].float()
    return _REFERENCE[case]


def _max_diffs(model: torch.nn.Module, ref: torch.Tensor, page_size: int, steps: int = STEPS) -> list[float]:
    """Max |ours - ref| of the prefill, then of each decode step."""
    pool = ReqToTokenPool(2, 64, "cpu")
    alloc = PagedAllocator(pool, 64 // page_size + 2, page_size)
    runner = ModelRunner(model, pool, 64 // page_size + 2, page_size, "torch_native")
    row = pool.alloc()
    assert row is not None and alloc.ensure(row, PROMPT + steps)
    tokens = _ids()[0].tolist()
    out = runner.forward(runner.make_batch(ForwardMode.EXTEND, tokens[:PROMPT], [row], [PROMPT], [PROMPT], logits="all"))
    diffs = [(out.logits - ref[:PROMPT]).abs().max().item()]
    for t in range(PROMPT, PROMPT + steps):
        out = runner.forward(runner.make_batch(ForwardMode.DECODE, [tokens[t]], [row], [t + 1], [1], stride=1))
        diffs.append((out.logits[0] - ref[t]).abs().max().item())
    return diffs


def _load(tiny_checkpoint, case: str) -> torch.nn.Module:  # noqa: ANN001
    arch, over = CASES[case]
    return load_checkpoint(tiny_checkpoint(arch, **over), dtype=torch.float32, device="cpu", progress=False).model


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("page_size", [1, 4])
def test_logits_match_transformers(tiny_checkpoint, tiny_hf, case: str, page_size: int) -> None:  # noqa: ANN001
    diffs = _max_diffs(_load(tiny_checkpoint, case), _reference(tiny_hf, case), page_size)
    assert diffs[0] <= 1e-4, f"prefill: max abs diff {diffs[0]:.2e}"
    worst = max(range(1, len(diffs)), key=lambda i: diffs[i])
    assert diffs[worst] <= 1e-4, f"decode step {worst - 1}: max abs diff {diffs[worst]:.2e}"


def test_configs_parse_as_intended(tiny_checkpoint) -> None:  # noqa: ANN001
    """The cases test what their names say (transformers writes these keys its own way)."""
    cfgs = {c: load_checkpoint(tiny_checkpoint(a, **o), dtype=torch.float32, device="cpu", progress=False).config
            for c, (a, o) in CASES.items()}
    assert cfgs["v2-dense"].deepseek.moe is not None and not any(cfgs["v2-dense"].deepseek.is_moe_layer(i) for i in range(3))
    assert cfgs["v2-greedy-yarn"].rope_scaling.kind == "yarn" and cfgs["v2-greedy-yarn"].rope_scaling.cos_sin_factor() != 1.0
    assert cfgs["v2-grouped-qlora"].deepseek.moe.topk_method == "group_limited_greedy"
    assert cfgs["v2-grouped-qlora"].deepseek.mla.q_lora_rank == 48
    v3 = cfgs["v3-noaux-qlora-yarn"].deepseek
    assert (v3.moe.topk_method, v3.moe.scoring_func, v3.moe.norm_topk_prob) == ("noaux_tc", "sigmoid", True)
    assert not cfgs["v3-neox-unnormed"].deepseek.mla.rope_interleave


def _bias_in_weights(logits: torch.Tensor, moe: MoEShape, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    _, ids = ROUTE(logits, moe, bias)
    assert bias is not None
    w = (logits.sigmoid() + bias).gather(1, ids)
    return w / w.sum(-1, keepdim=True) * moe.routed_scaling_factor, ids


ROUTE = deepseek_moe.route
MUTATIONS: dict[str, tuple[str, Callable]] = {
    "v3-selection-ignores-bias": ("v3-noaux-qlora-yarn", lambda lg, m, b: ROUTE(lg, m, None)),
    "v3-weights-from-biased-scores": ("v3-noaux-qlora-yarn", _bias_in_weights),
    "v3-groups-by-max": ("v3-noaux-qlora-yarn", lambda lg, m, b: ROUTE(lg, dataclasses.replace(m, topk_method="group_limited_greedy"), b)),
    "v3-no-group-limit": ("v3-noaux-qlora-yarn", lambda lg, m, b: ROUTE(lg, dataclasses.replace(m, n_group=1, topk_group=1), b)),
    "v2-no-group-limit": ("v2-grouped-qlora", lambda lg, m, b: ROUTE(lg, dataclasses.replace(m, topk_method="greedy"), b)),
    "v2-normalised-weights": ("v2-grouped-qlora", lambda lg, m, b: ROUTE(lg, dataclasses.replace(m, norm_topk_prob=True), b)),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_wrong_routing_breaks_parity(tiny_checkpoint, tiny_hf, mutation: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """The routing checks can fail: each wrong rule picks other experts (or weighs them
    otherwise) on the parity prompt, and the logits move past the tolerance."""
    case, wrong = MUTATIONS[mutation]
    model, ref = _load(tiny_checkpoint, case), _reference(tiny_hf, case)
    monkeypatch.setattr(deepseek_moe, "route", wrong)
    assert max(_max_diffs(model, ref, 1, steps=2)) > 1e-3


@pytest.mark.parametrize("path", ["grouped_mm", "gather", "loop", "dense"])
def test_every_expert_path_matches_transformers(tiny_checkpoint, tiny_hf, path: str) -> None:  # noqa: ANN001
    model = _load(tiny_checkpoint, "v3-noaux-qlora-yarn")
    for m in model.modules():
        if isinstance(m, StackedExperts):
            m.path = path
    assert max(_max_diffs(model, _reference(tiny_hf, "v3-noaux-qlora-yarn"), 4, steps=4)) <= 1e-4


def test_expert_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deepseek_moe, "_GROUPED_MM_OK", {})  # unprobed, whatever ran before
    moe = MoEShape(n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=16)
    experts = StackedExperts(32, moe)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in experts.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    for t in (1, 5, 37):
        x = torch.randn(t, 32, generator=gen)
        ids = torch.stack([torch.randperm(8, generator=gen)[:3] for _ in range(t)])
        w = torch.rand(t, 3, generator=gen)
        outs = {}
        for path in ("grouped_mm", "gather", "loop", "dense"):
            experts.path = path
            outs[path] = experts(x, ids, w)
        for path in ("grouped_mm", "gather", "dense"):
            assert torch.allclose(outs[path], outs["loop"], atol=1e-5), path
    experts.path = "auto"
    assert experts.pick_path(4) == "loop"  # not probed yet: nothing assumes grouped_mm works
    experts.prepare()
    assert experts.pick_path(4) == "grouped_mm"  # CPU, fp32, 16-byte aligned widths

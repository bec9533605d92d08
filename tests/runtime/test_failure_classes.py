"""One regression test per failure class of ../shared/design/spec-decoding.md (1-11), each written
so that reintroducing the bug makes it fail. Classes 4 and 5 also have kernel-level tests in
tests/test_batch.py and tests/attention/test_triton.py; the emulator catches 6 and 10 on CPU."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from updraft.attention.torch_native import TorchNativeBackend
from updraft.batch import FeatureKind, ForwardMode
from updraft.kit.cases import AttnCase
from updraft.kit.graph_harness import AttentionProbe, run_graph
from updraft.kit.harness import build_case, make_batch
from updraft.llm import LLM
from updraft.runtime.graphs.device_graph import EmulatedGraph, GraphDivergenceError
from updraft.runtime.graphs.phase_graph import BatchShape, PhaseGraphRunner, PhaseSpec
from updraft.sampling_params import SamplingParams
from updraft.testing import write_eagle_head

M = ForwardMode
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(rng.randrange(4, 24))] for _ in range(n)]


@pytest.fixture(scope="module")
def target(tiny_checkpoint):  # noqa: ANN001, ANN201
    return tiny_checkpoint("llama")


@pytest.fixture(scope="module")
def reference(target):  # noqa: ANN001, ANN201
    llm = LLM(str(target), device="cpu", progress=False)
    return lambda ps: [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)]


def probe_runner(case: AttnCase, backend_cls=TorchNativeBackend):  # noqa: ANN001, ANN201
    setup = build_case(case)
    backend = backend_cls(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
    probe = AttentionProbe(case.num_heads, case.num_kv_heads, case.head_dim, torch.float32, "cpu")
    dim = (case.num_heads + 2 * case.num_kv_heads) * case.head_dim
    phase = PhaseSpec(case.mode, case.extend_lens[0], "all", feature=FeatureKind.PROBE, feature_dim=dim)
    runner = PhaseGraphRunner(probe, backend, phase, [case.batch_size], emulate=True, pool=None)
    runner.capture()
    t = sum(case.extend_lens)
    qkv = torch.cat([setup.q.reshape(t, -1), setup.k_new.reshape(t, -1), setup.v_new.reshape(t, -1)], -1)
    # the production builder writes the case into the static inputs; the replay view comes back
    batch = runner.stage([0] * t, list(setup.rows), list(case.seq_lens), list(case.extend_lens), setup.req_to_token, feature=qkv)
    return runner, backend, batch


def test_class1_packed_layout_same_builder_at_capture_and_replay() -> None:
    """v1 draft extend: captured with a uniform layout, replayed packed from accept lengths."""
    case = AttnCase(M.DRAFT_EXTEND, 8, 2, 16, 1, (16, 0, 5), (1, 4, 2), "float32", "shuffled")
    r = run_graph("triton", case, 1, "fill")
    assert r.ok, r.describe()


@pytest.fixture(scope="module")
def eagle(tmp_path_factory):  # noqa: ANN001, ANN201
    return write_eagle_head(tmp_path_factory.mktemp("eagle"))


def graph_llm(target, **kw):  # noqa: ANN001, ANN003, ANN201
    return LLM(str(target), device="cpu", progress=False, graph_emulate=True, **kw)


def test_class2_batches_above_the_largest_graph_fall_back(target, reference, eagle) -> None:  # noqa: ANN001
    cfg = {"method": "eagle", "model": str(eagle), "num_speculative_tokens": 3, "adaptive": False}
    # the per-phase runners are under test here (the fused iteration has its own tests)
    llm = graph_llm(target, cuda_graph_max_bs=2, speculative_config=cfg, disable_fused_iteration=True)
    ps = prompts(5, seed=2)
    # Different lengths: the batch starts above the largest graph (eager) and shrinks into it.
    params = [dataclasses.replace(GREEDY, max_tokens=4 + 3 * i) for i in range(5)]
    got = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
    assert got == [r[: p.max_tokens] for r, p in zip(reference(ps), params)]
    counts = llm.engine.spec.proposer.runner.path_counts  # type: ignore[union-attr]
    assert any("eager: batch size" in k for k in counts) and any(k.endswith("graph") for k in counts)


def test_class3_v2_graph_outputs_only_selected_rows(target, eagle) -> None:  # noqa: ANN001
    cfg = {"method": "eagle", "model": str(eagle), "num_speculative_tokens": 3, "adaptive": False}
    llm = graph_llm(target, cuda_graph_max_bs=4, speculative_config=cfg, disable_fused_iteration=True)
    g = llm.engine.spec.proposer.runner.graph(M.DRAFT_EXTEND_V2)  # type: ignore[union-attr]
    out = g.graphs[4].output
    assert out.logits.shape[0] == 4  # one row per request, not 4 * ndt; no probabilities
    assert out.logits.dtype == torch.float32 and out.hidden.shape[0] == 4
    # ... and V2 is routed to the extend path: a decode path that raises is never reached.
    case = AttnCase(M.DRAFT_EXTEND_V2, 4, 2, 16, 1, (5,), (4,))
    runner, backend, batch = probe_runner(case)

    def boom(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("DRAFT_EXTEND_V2 reached forward_decode")

    backend.forward_decode = boom  # type: ignore[method-assign]
    runner.replay(batch)


def test_class4_padded_rows_clamp_kv_lens() -> None:
    """Padded graph rows have seq_lens (fill 1) < extend (stride): kv_lens must clamp at 0."""
    case = AttnCase(M.TARGET_VERIFY, 8, 2, 16, 1, (9,), (4,), "float32", "shuffled")
    r = run_graph("triton", case, 4, "fill")
    assert r.ok and not r.invariant_error, r.describe()


def test_class6_recomputed_host_scalar_is_caught_by_the_emulator() -> None:
    case = AttnCase(M.DECODE, 4, 2, 16, 1, (7, 3), (1, 1))
    runner, backend, batch = probe_runner(case)
    runner.replay(batch)  # fine
    real = backend.init_replay_metadata

    def recomputes(b):  # noqa: ANN001, ANN202
        real(b)
        b.attn_metadata.max_kv = int(b.seq_lens_cpu.max())  # the bug: a per-step host scalar

    backend.init_replay_metadata = recomputes  # type: ignore[method-assign]
    with pytest.raises(GraphDivergenceError, match="max_kv"):
        runner.replay(batch)


def test_class6_rebound_tensor_is_caught_by_the_emulator() -> None:
    case = AttnCase(M.DECODE, 4, 2, 16, 1, (7, 3), (1, 1))
    runner, backend, batch = probe_runner(case)

    def rebinds(b):  # noqa: ANN001, ANN202
        md = b.attn_metadata
        md.kv_slots = md.kv_slots.clone()  # the bug: a new tensor instead of copy_ into the old

    backend.init_replay_metadata = rebinds  # type: ignore[method-assign]
    with pytest.raises(GraphDivergenceError, match="kv_slots"):
        runner.replay(batch)


def test_class7_outputs_alias_static_buffers() -> None:
    g = EmulatedGraph()
    state = {"v": 1.0}
    out = g.capture(lambda: torch.full((2,), state["v"]), watch=lambda: None)
    held = out
    state["v"] = 2.0
    g.replay()
    assert held is g.output and float(held[0]) == 2.0  # a later replay overwrote the held output


def test_class7_engine_consumers_copy_before_the_next_replay(target, reference, eagle) -> None:  # noqa: ANN001
    for version in ("v2", "v1"):
        cfg = {"method": "eagle", "model": str(eagle), "num_speculative_tokens": 4, "draft_extend": version, "adaptive": False}
        llm = graph_llm(target, cuda_graph_max_bs=8, speculative_config=cfg, disable_fused_iteration=True)
        ps = prompts(6, seed=3)
        assert [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)] == reference(ps)
        assert llm.engine.runner.graph_hit_rate() == 1.0


def test_class8_capture_is_seeded_not_zero() -> None:
    case = AttnCase(M.TARGET_VERIFY, 4, 2, 16, 1, (5, 2), (4, 4))
    runner, _, _ = probe_runner(case)
    b = runner.batches[2]
    assert int(b.seq_lens.min()) >= 1 and int(b.extend_seq_lens.min()) == 4
    assert torch.isfinite(runner.graphs[2].output.logits).all()


def test_class9_width_mismatch_is_refused() -> None:
    case = AttnCase(M.TARGET_VERIFY, 4, 2, 16, 1, (5,), (4,))
    runner, _, _ = probe_runner(case)
    other = build_case(AttnCase(M.TARGET_VERIFY, 4, 2, 16, 1, (5,), (6,)))
    b = make_batch(other)
    b.logits_indices = torch.arange(b.num_tokens)
    b.set_feature(FeatureKind.PROBE, torch.zeros(b.num_tokens, 4 * 16 + 2 * 2 * 16))
    ok, reason = runner.can_run(BatchShape.of(b))
    assert not ok and "width" in reason


def test_class10_replays_with_shrinking_lengths_stay_exact() -> None:
    long = AttnCase(M.DECODE, 4, 2, 16, 1, (40, 33), (1, 1), "float32", "interleaved")
    short = dataclasses.replace(long, prefix_lens=(3, 1))
    for case in (long, short, long):
        r = run_graph("torch_native", case, 2, "fill")
        assert r.ok, r.describe()


def test_class11_exact_max_context_with_lookahead(target, reference, eagle) -> None:  # noqa: ANN001
    cfg = {"method": "eagle", "model": str(eagle), "num_speculative_tokens": 4}
    llm = graph_llm(target, max_model_len=40, speculative_config=cfg)
    eng = llm.engine
    assert eng.req_pool.width >= eng.max_model_len + eng.lookahead
    ps = [[5] * 30, [6] * 35]
    outs = llm.generate(ps, SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))
    for p, o in zip(ps, outs):
        assert o.outputs[0].finish_reason == "length" and len(p) + len(o.outputs[0].token_ids) == 40
    plain = LLM(str(target), device="cpu", progress=False, max_model_len=40)
    ref = [o.outputs[0].token_ids for o in plain.generate(ps, SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))]
    assert [o.outputs[0].token_ids for o in outs] == ref

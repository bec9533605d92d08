"""The fused speculative iteration (one graph per iteration, state on the device) under the CPU
graph emulator: lossless greedy for EAGLE / EAGLE-3 x overlap on/off x adaptive S on/off x
batch 1 and 8 mixed lengths; seeded sampling repeats token for token; stops, max_tokens and
aborts with an iteration in flight free every KV slot exactly once."""

from __future__ import annotations

import pytest
import torch

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams
from updraft.spec.ngram_device import match_drafts
from updraft.testing import repeating_prompts as prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)  # = conftest.SPEC_GREEDY


def fused_llm(target, head, kind: str, *, overlap: bool = True, adaptive: bool = True, steps: int = 3,  # noqa: ANN001
              context_vocab: int | None = None, **kw) -> LLM:
    cfg = {"method": kind, "draft_model": str(head), "num_steps": steps, "adaptive": adaptive}
    if context_vocab is not None:
        cfg["context_vocab"] = context_vocab
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4, 8],
              disable_overlap=not overlap, speculative_config=cfg, **kw)
    assert llm.engine.driver is not None, llm.engine.graph_log
    return llm


@pytest.mark.parametrize("adaptive", [True, False])
@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
@pytest.mark.parametrize("bsz", [1, 8])
def test_fused_lossless_greedy(target, reference, eagle_head, eagle3_head, kind: str, overlap: bool, adaptive: bool, bsz: int) -> None:  # noqa: ANN001
    head = eagle_head if kind == "eagle" else eagle3_head
    llm = fused_llm(target, head, kind, overlap=overlap, adaptive=adaptive)
    ps = prompts(bsz, seed=10 + bsz)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    eng = llm.engine
    assert eng.driver is not None and eng.driver.launches > 0
    assert eng.driver.fused.graphs, "no fused graph was captured"
    assert sum(eng.driver.chosen_steps().values()) == eng.driver.launches  # what /metrics exposes
    if not adaptive:
        assert eng.spec_stats.num_draft_tokens == 3 * eng.spec_stats.num_drafts > 0
    assert eng.allocator.used_tokens == 0 and eng.req_pool.num_free == eng.req_pool.max_reqs
    eng.allocator.check_consistency()


@pytest.mark.parametrize("bsz", [1, 8])
def test_fused_lossless_with_a_deeper_eagle3_head(target, reference, eagle3_deep_head, bsz: int) -> None:  # noqa: ANN001
    """A three-layer EAGLE-3 head (its draft KV pool has three layers) in the fused iteration:
    exact greedy outputs, graphs captured, KV all returned."""
    llm = fused_llm(target, eagle3_deep_head, "eagle3", adaptive=False)
    assert llm.engine.driver.fused.graphs is not None
    ps = prompts(bsz, seed=30 + bsz)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    eng = llm.engine
    assert eng.driver.fused.graphs and eng.spec_stats.num_draft_tokens == 3 * eng.spec_stats.num_drafts > 0
    assert eng.allocator.used_tokens == 0


def test_fused_self_consistent_with_per_phase_path(target, reference, eagle_head) -> None:  # noqa: ANN001
    """A batch that mixes a penalty request (per-phase path) with greedy ones switches paths
    between iterations; the greedy outputs stay exact."""
    llm = fused_llm(target, eagle_head, "eagle")
    ps = prompts(4, seed=3)
    params = [GREEDY] * 3 + [SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, repetition_penalty=1.2)]
    outs = llm.generate(ps, params)
    ref = reference(ps[:3])
    assert [o.outputs[0].token_ids for o in outs[:3]] == ref
    assert llm.engine.driver.launches > 0
    assert llm.engine.allocator.used_tokens == 0


def test_fused_seeded_sampling_repeats(target, eagle_head) -> None:  # noqa: ANN001
    ps = prompts(3, seed=5)
    params = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, max_tokens=16, seed=7, ignore_eos=True)
    runs = []
    for _ in range(2):
        llm = fused_llm(target, eagle_head, "eagle", adaptive=False)
        runs.append([o.outputs[0].token_ids for o in llm.generate(ps, params)])
        assert llm.engine.driver.launches > 0
    assert runs[0] == runs[1]
    assert all(len(r) == 16 for r in runs[0])


@pytest.mark.parametrize("overlap", [True, False])
def test_fused_stops_inside_accepted_block(target, reference, eagle_head, overlap: bool) -> None:  # noqa: ANN001
    """A stop id and max_tokens landing inside an accepted block: nothing after the stop."""
    ps = prompts(3, seed=9)
    ref = reference(ps)
    stop_at = ref[0][5]
    llm = fused_llm(target, eagle_head, "eagle", overlap=overlap)
    params = [SamplingParams(temperature=0.0, max_tokens=20, stop_token_ids=[stop_at], ignore_eos=True),
              SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True), GREEDY]
    outs = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
    first = ref[0].index(stop_at)
    assert outs[0] == ref[0][: first + 1]
    assert outs[1] == ref[1][:7]
    assert outs[2] == ref[2]
    assert llm.engine.allocator.used_tokens == 0


def test_fused_abort_mid_flight_frees_kv_once(target, eagle_head, abort_mid_flight) -> None:  # noqa: ANN001
    llm = fused_llm(target, eagle_head, "eagle")
    eng = llm.engine
    reqs = abort_mid_flight(eng, SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True))
    assert reqs[1].finish_reason == "abort" and reqs[0].finish_reason == "length"
    assert eng.allocator.used_tokens == 0 and eng.req_pool.num_free == eng.req_pool.max_reqs
    eng.allocator.check_consistency()


def test_fused_preemption_under_kv_pressure(target, reference, eagle_head) -> None:  # noqa: ANN001
    ps = prompts(6, seed=4)
    llm = fused_llm(target, eagle_head, "eagle", max_total_tokens=160)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    assert llm.engine.stats.preemptions > 0, "the pool was meant to force preemptions"
    assert llm.engine.allocator.used_tokens == 0


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_host_ops_per_fused_iteration_within_budget(target, eagle_head, eagle3_head, step_ops, kind: str) -> None:  # noqa: ANN001
    """Host tensor ops per speculative iteration (bs 1, steady state), counted over
    Engine.step() (``step_ops``). Budget: 50 (issue 12). EAGLE-3 runs with 256 context tokens,
    whose host side (``ContextVocab.observe``) writes only for a new token (3.2 ops an iteration
    here against 2.0 without them: the random head emits many tokens outside its vocabulary)."""
    llm = fused_llm(target, eagle_head if kind == "eagle" else eagle3_head, kind, adaptive=False,
                    context_vocab=256 if kind == "eagle3" else None)
    eng = llm.engine
    assert (eng.spec.proposer.context is not None) == (kind == "eagle3")  # type: ignore[union-attr]
    req = eng.add_request(prompts(1, seed=1)[0], SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True))
    while len(req.output_ids) < 2:
        eng.step()
    for _ in range(3):
        eng.step()
    per_iter = step_ops(eng, 10)
    assert per_iter <= 50, f"{per_iter:.1f} host tensor ops per speculative iteration (budget 50)"


def test_sampled_body_kernels_within_budget(target, eagle3_head, body_kernels) -> None:  # noqa: ANN001
    """Device kernels the sampled iteration body adds to the greedy one (EAGLE-3, S = 5, bs 1
    and 8; ``body_kernels``). On a small model every kernel node of the graph costs ~1.5-4 us of
    replay. Budget: 8 = one gather of the packed parameters, the uniforms (reading the RNG keys
    in place), per draft step a top-k and ``choose`` where greedy has one argmax (5), the two
    acceptance kernels, minus greedy's argmax of the verify rows. Both bodies end in the same
    ``commit`` launch, which holds the greedy matching (five torch ops when they were counted
    against this budget, which was 3 then: the sampled path's own additions were 9 with a second
    gather for the RNG keys). It was 32 / 37 before the parameters were packed and the draft's
    choice fused. The greedy body here reads the draft's logits as the sampled one does (``head_pick`` off: with
    it, greedy's picks take the LM head's rows, two launches a step as cuBLAS's head and the
    argmax are on a GPU, but fewer ops than ``F.linear`` counts here); with it, no more kernels.
    """
    from updraft.spec.fused import FusedIteration

    fused = fused_llm(target, eagle3_head, "eagle3", adaptive=False, steps=5).engine.driver.fused
    for bs in (1, 8):
        rows_pick = body_kernels(fused, 5, False, bs)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(FusedIteration, "head_pick", False)
            greedy, sampled = (body_kernels(fused, 5, sampled, bs) for sampled in (False, True))
        assert sampled - greedy <= 8, f"bs {bs}: sampled {sampled} vs greedy {greedy} kernels (budget +8)"
        assert rows_pick <= greedy, f"bs {bs}: greedy with head_pick {rows_pick} vs {greedy} kernels"


def test_sampled_body_above_the_largest_graph(target, eagle3_head, monkeypatch) -> None:  # noqa: ANN001
    """The body at a batch above every captured size (the kit's eager check of a batch that
    falls back) runs its acceptance kernels on tickets of its own: the iteration's owned ones
    cover the captured sizes only (an H100 kit run caught the body asserting on them)."""
    from updraft.spec import rejection_kernels

    monkeypatch.setattr(rejection_kernels, "INTERPRET", True)
    fused = fused_llm(target, eagle3_head, "eagle3", adaptive=False, steps=3).engine.driver.fused
    bs = fused.sizes[-1] + 1
    g = fused._build(3, True, bs)
    with torch.inference_mode():
        out = fused._body(g)
    assert out.shape == (bs, 5) and bool((out[:, 0] >= 1).all())
    assert not fused._tickets.any()


def test_commit_is_one_launch_in_both_bodies(target, eagle3_head, body_kernels, monkeypatch) -> None:  # noqa: ANN001
    """The iteration's end (acceptance, row state, output block, next draft feature) is one launch
    (``spec.commit``) where its torch reference is ~20 kernel nodes: each body, greedy and
    sampled, has at least 15 kernels fewer with it."""
    from updraft.spec import commit
    from updraft.spec import fused as fused_mod

    fused = fused_llm(target, eagle3_head, "eagle3", adaptive=False, steps=5).engine.driver.fused
    with_kernel = {sampled: body_kernels(fused, 5, sampled, 8) for sampled in (False, True)}
    monkeypatch.setattr(fused_mod, "commit", commit.commit_torch)
    with_torch = {sampled: body_kernels(fused, 5, sampled, 8) for sampled in (False, True)}
    for sampled in (False, True):
        assert with_torch[sampled] - with_kernel[sampled] >= 15, (sampled, with_torch, with_kernel)


FIRST_PROMPT = (5, 17, 42, 9, 5, 17)
FIRST_PARAMS = SamplingParams(temperature=0.8, top_k=6, max_tokens=2, ignore_eos=True)


def _first_two_tokens(target, eagle_head, n: int) -> list[list[int]]:  # noqa: ANN001
    """The first two tokens of ``n`` seeded requests (T 0.8, top-k 6) through the fused graph
    (emulated), 8 at a time: the prefill samples the first, the speculative iteration the second."""
    import dataclasses

    eng = fused_llm(target, eagle_head, "eagle", adaptive=False, max_running_requests=8).engine
    reqs = [eng.add_request(list(FIRST_PROMPT), dataclasses.replace(FIRST_PARAMS, seed=i)) for i in range(n)]
    while eng.has_unfinished():
        eng.step()
    assert eng.driver.launches > 0
    return [r.output_ids[:2] for r in reqs]


def test_fused_sampling_matches_the_target_distribution(target, eagle_head, monkeypatch) -> None:  # noqa: ANN001
    """End to end through the fused graph (emulated): the first token the speculative iteration
    emits follows the target's own sampling distribution (T 0.8, top-k 6), chi-square over 1500
    seeded requests, conditioned on the most frequent first token (sampled by the prefill).
    A random head rarely drafts the target's likely tokens, so this checks the plumbing
    (parameters, seeds, draws, residuals); the power against a wrong q or residual rule is in
    test_device_sampling.py.

    Where the suite runs the Triton interpreter, the 1500 requests take the torch paths (the
    interpreted kernels cost ~0.12 s a request: 200 s of CI) and the kernels' iteration is tied
    to them instead: its first 120 requests give the same tokens, to the last one, as the torch
    paths' (the same counter-based draws; a rejected draft resamples from the residual in nearly
    every request here)."""
    import numpy as np
    from scipy.stats import chisquare

    from updraft.batch import ForwardMode
    from updraft.runtime.sampler import Sampler, SamplingBatch
    from updraft.spec.sampling_kernels import interpreter_on

    prompt = list(FIRST_PROMPT)
    kernels = _first_two_tokens(target, eagle_head, 120) if interpreter_on() else None
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    pairs = _first_two_tokens(target, eagle_head, 1500)
    if kernels is not None:
        assert kernels == pairs[:120]
    firsts = [p[0] for p in pairs]
    t1 = max(set(firsts), key=firsts.count)
    seconds = [p[1] for p in pairs if p[0] == t1]
    assert len(seconds) > 150
    # The target's distribution after prompt + t1, from a plain engine's prefill logits.
    ref = LLM(str(target), device="cpu", progress=False).engine
    row = ref.req_pool.alloc()
    assert row is not None and ref.allocator.ensure(row, len(prompt) + 1)
    n = len(prompt) + 1
    logits = ref.runner.forward(ref.runner.make_batch(ForwardMode.EXTEND, prompt + [t1], [row], [n], [n])).logits
    probs = Sampler().probs(logits, SamplingBatch.build([FIRST_PARAMS], [None], logits.shape[-1], "cpu"))[0].double().numpy()
    obs = np.bincount(seconds, minlength=probs.shape[0])
    support = probs > 0
    assert obs[~support].sum() == 0
    assert chisquare(obs[support], probs[support] / probs[support].sum() * obs.sum()).pvalue > 1e-4


def test_fused_steps_make_no_cuda_event_and_no_stream_lookup(target, reference, eagle_head, fake_cuda) -> None:  # noqa: ANN001
    """On CUDA a speculative iteration makes no event and calls no ``torch.cuda.current_stream``
    (each was host time per iteration on the H100: three new events, three stream lookups): the
    CUDA launcher and table writer run here over faked events and stream, the graph emulated."""
    import torch

    from updraft.memory.table_writer import TableWriter
    from updraft.runtime.launcher import CudaLauncher

    llm = fused_llm(target, eagle_head, "eagle", adaptive=False)
    eng = llm.engine
    eng.driver.fused.launcher = CudaLauncher(torch.device("cpu"))
    eng.allocator.table_writer = TableWriter(eng.req_pool.req_to_token, staged=True)
    made, lookups = fake_cuda.events, fake_cuda.stream_lookups
    ps = prompts(3, seed=6)
    params = SamplingParams(temperature=0.0, max_tokens=120, ignore_eos=True)
    outs = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
    assert [o[:20] for o in outs] == reference(ps) and all(len(o) == 120 for o in outs)
    launches = eng.driver.launches
    assert launches >= 20
    assert len(fake_cuda.records) > 3 * launches + 3, "expected table writes while decoding"
    assert (fake_cuda.events, fake_cuda.stream_lookups) == (made, lookups), "an event or a stream lookup per iteration"
    assert all(s is fake_cuda.stream for _, s in fake_cuda.records)


def test_fused_launch_copies_the_rows_only_when_the_batch_changes(target, eagle_head, monkeypatch) -> None:  # noqa: ANN001
    """A steady batch replays on the rows its graph already holds (no host-to-device copy per
    iteration); when a request leaves, the next launch copies the new rows once."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from updraft.spec import commit, ngram_device, row_io

    # The Triton interpreter writes every tensor argument back with copy_ after a launch, which
    # the count below would take for a host copy into the rows: read the rows, lay out the
    # batches, look up the assist's drafts and commit the results with torch here.
    monkeypatch.setattr(row_io, "use_triton", lambda t: False)
    monkeypatch.setattr(commit, "use_triton", lambda t: False)
    monkeypatch.setattr(ngram_device, "use_triton", lambda t: False)
    llm = fused_llm(target, eagle_head, "eagle", adaptive=False)
    eng = llm.engine
    fused = eng.driver.fused
    reqs = [eng.add_request(p, SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)) for p in prompts(4, seed=8)]
    while any(r.in_prefill for r in reqs) or eng.driver.inflight is None:
        eng.step()
    eng.step()
    rows_ptrs = {g.rows.data_ptr() for g in fused.graphs.values()}

    class RowCopies(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func is torch.ops.aten.copy_.default and args[0].data_ptr() in rows_ptrs:
                RowCopies.n += 1
            return func(*args, **(kwargs or {}))

    def copies(steps: int) -> int:
        RowCopies.n = 0
        launches = eng.driver.launches
        with RowCopies():
            for _ in range(steps):
                eng.step()
        assert eng.driver.launches - launches == steps
        return RowCopies.n

    assert copies(5) == 0
    eng.abort(reqs[1].request_id)  # 3 requests: the same captured batch size (4), other rows
    assert copies(1) == 1
    assert copies(5) == 0
    while eng.has_unfinished():
        eng.step()
    assert [len(r.output_ids) for r in reqs if r is not reqs[1]] == [60, 60, 60]


@pytest.mark.parametrize("bsz", [1, 8])
def test_fused_lossless_with_an_fp8_draft_lm_head(target, reference, eagle3_head, bsz: int, monkeypatch) -> None:  # noqa: ANN001
    """``draft_lm_head="fp8"``: the chain steps and the draft extend take the FP8 LM head (a spy
    sees the kernel's logits) and the output still equals plain greedy (drafts only propose)."""
    from updraft.models import fused

    served: list[int] = []
    real = fused.lm_head_fp8

    def spy(x, q, scale):  # noqa: ANN001, ANN202
        out = real(x, q, scale)
        if out is not None:
            served.append(x.shape[0])
        return out

    monkeypatch.setattr(fused, "lm_head_fp8", spy)
    cfg = {"method": "eagle3", "draft_model": str(eagle3_head), "num_steps": 3, "draft_lm_head": "fp8"}
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4, 8],
              speculative_config=cfg)
    head = llm.engine.driver.fused.drafter.head
    assert head.lm_head_fp8 is not None and head.lm_head_fp8[0].dtype == torch.float8_e4m3fn
    ps = prompts(bsz, seed=40 + bsz)
    outs = llm.generate(ps, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == reference(ps)
    assert llm.engine.driver.launches > 0 and served, "the FP8 LM head never ran"
    assert llm.engine.allocator.used_tokens == 0
    head.quantize_lm_head(False)  # back to the weight: no FP8 copy left to serve
    assert head.lm_head_fp8 is None


@pytest.mark.parametrize("sampled", [False, True])
def test_forwards_read_one_layout_and_their_ids_where_they_land(target, eagle3_head, sampled: bool) -> None:  # noqa: ANN001
    """No forward of the iteration sets up its own inputs: every batch's positions, KV slots and
    lengths are views of the one ``IterLayout`` that ``read_rows`` writes (the verify block and
    the draft extend share theirs), every ``req_pool_indices`` is the graph's row list, draft
    step k reads its token from column k of the verify block's ids, and the emitted tokens the
    iteration reports are the ones the draft extend read."""
    fused = fused_llm(target, eagle3_head, "eagle3", adaptive=False, steps=5).engine.driver.fused
    bs, s = 8, 5
    g = fused._build(s, sampled, bs)
    lay = g.layout
    assert lay.widths == (1, 1, 1, 1, s + 1) and lay.seq_lens.shape == (s, bs)

    def inside(t: torch.Tensor, storage: torch.Tensor) -> bool:
        lo = storage.data_ptr()
        return lo <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= lo + storage.numel() * storage.element_size()

    assert g.extend is not None
    for b in [*g.chain, g.verify, g.extend]:
        assert b.req_pool_indices is g.rows
        assert inside(b.positions, lay.positions) and inside(b.out_cache_loc, lay.out_cache_loc)
        assert inside(b.seq_lens, lay.seq_lens)
    for name in ("positions", "out_cache_loc", "seq_lens"):
        assert getattr(g.extend, name).data_ptr() == getattr(g.verify, name).data_ptr(), name
    assert g.ids.data_ptr() == g.verify.input_ids.data_ptr()
    for k, b in enumerate(g.chain, start=1):
        assert b.input_ids.data_ptr() == g.ids[:, k].data_ptr() and b.input_ids.stride(0) == s + 1
    n = fused.state.seq_len[g.rows].clone()  # padding rows (row 0): length 1
    with torch.inference_mode():
        fused._body(g)
    assert torch.equal(g.out[:, 1:], g.extend.input_ids.view(bs, s + 1))
    assert torch.equal(g.verify.positions.view(bs, s + 1), n[:, None] - 1 + torch.arange(s + 1))


def test_greedy_bodies_take_logits_in_the_model_dtype(target, eagle3_head, monkeypatch) -> None:  # noqa: ANN001
    """A bf16 engine's iteration hands its LM heads' rows to the argmax / top-k / acceptance
    kernels as bf16 (``ForwardBatch.fp32_logits`` off): in neither body is any of the S + 1 LM
    heads' outputs widened (on a GPU each widening was a torch kernel between the head's GEMM and
    its reader), and the sampled body converts nothing the greedy one does not. The draft tokens
    and the bonus land in the verify block's ids in place: no stack of them."""
    from updraft.spec import rejection_kernels
    from updraft.testing import count_ops

    monkeypatch.setattr(rejection_kernels, "INTERPRET", True)
    fused = fused_llm(target, eagle3_head, "eagle3", adaptive=False, steps=5, dtype="bfloat16").engine.driver.fused
    conversions = {}
    for sampled in (False, True):
        g = fused._build(5, sampled, 1)
        assert not any(b.fp32_logits for b in g.chain) and not g.verify.fp32_logits
        with torch.inference_mode():
            fused._body(g)
            names = count_ops(lambda g=g: fused._body(g)).names
        conversions[sampled] = names.get("to", 0)
        assert names.get("stack", 0) == 0, names
    assert conversions[True] == conversions[False], conversions


@pytest.mark.parametrize("when", ["start", "first-use"])
def test_sampled_graphs_captured_when_configured(target, eagle3_head, when: str) -> None:  # noqa: ANN001
    """``sampled_graphs="start"`` captures a sampled graph for every S adaptive speculation may
    pick before any request (a capture mid-serving stalls every request in flight);
    ``first-use`` leaves them to the first sampled batch."""
    cfg = {"method": "eagle3", "draft_model": str(eagle3_head), "num_steps": 3}
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1],
              sampled_graphs=when, speculative_config=cfg)
    driver = llm.engine.driver
    assert driver is not None
    choices = driver.adaptive.choices
    sampled = {s for s, was_sampled, _ in driver.fused.graphs if was_sampled}
    greedy = {s for s, was_sampled, _ in driver.fused.graphs if not was_sampled}
    assert greedy == set(choices)
    assert sampled == (set(choices) if when == "start" else set())
    assert ("greedy and sampled graphs" in driver.describe()) == (when == "start")
    before = len(driver.fused.graphs)
    out = llm.generate(prompts(1, seed=3), SamplingParams(temperature=0.8, max_tokens=12, seed=5, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 12
    # a seeded request pins S = num_steps: first use captures that one graph, start none
    assert len(driver.fused.graphs) - before == (0 if when == "start" else 1)


def test_lookup_assist_drafts_what_the_history_repeats(target, reference, eagle3_head) -> None:  # noqa: ANN001
    """``ngram_assist``: where a row's history repeats its last tokens the verify checks the
    lookup's drafts instead of the head's. The tiny target repeats its text and the random head
    drafts almost nothing right, so with the assist on more drafts are accepted; both runs emit
    exactly plain greedy's tokens."""
    ps = prompts(4, seed=21)
    accepted = {}
    for assist in (0, 2):
        cfg = {"method": "eagle3", "draft_model": str(eagle3_head), "num_steps": 3, "adaptive": False,
               "ngram_assist": assist}
        llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4],
                  speculative_config=cfg)
        eng = llm.engine
        assert eng.driver is not None and (eng.driver.fused.assist is not None) == bool(assist)
        outs = llm.generate(ps, GREEDY)
        assert [o.outputs[0].token_ids for o in outs] == reference(ps)
        assert eng.driver.launches > 0
        accepted[assist] = eng.spec_stats.num_accepted_tokens
        assert ("lookups where the history repeats" in eng.driver.describe()) == bool(assist)
    assert accepted[2] > accepted[0] + 10, accepted


def test_sampled_lookup_assist_makes_q_one_hot(target, eagle_head, monkeypatch) -> None:  # noqa: ANN001
    """Sampled iterations with the lookup assist: in every row whose drafts the lookup replaced
    (its 1-token suffix repeats: the prompt holds the ids 0..239 once), the acceptance reads q
    one-hot at each lookup draft, over distinct candidates; the other rows keep the head's drafts
    and q. (The acceptance with one-hot q is the n-gram proposer's, whose distribution the
    rejection kernels' chi-square tests check.) Seeded requests repeat token for token."""
    import dataclasses

    from updraft.spec.ngram_device import DeviceNgram

    seen: list[int] = []
    real = DeviceNgram.lookup_into

    def spy(self, rows, lens, ids, min_match=0, dist=None):  # noqa: ANN001, ANN202
        before = (ids.clone(), *(t.clone() for t in dist)) if dist is not None else None
        real(self, rows, lens, ids, min_match, dist)
        if dist is None or before is None:
            return
        drafts, match = match_drafts(self.hist[rows], lens, self.n_min, self.n_max, ids.shape[1] - 1, self.pad,
                                     with_match=True)
        for b in range(ids.shape[0]):
            if int(match[b]) >= min_match:
                seen.append(b)
                assert torch.equal(ids[b, 1:], drafts[b])
                assert torch.equal(dist[0][b, :, 0], torch.ones_like(dist[0][b, :, 0])) and not dist[0][b, :, 1:].any()
                assert torch.equal(dist[1][b, :, 0], drafts[b])
                assert all(len(set(c.tolist())) == c.numel() for c in dist[1][b])
            else:
                for got, old in zip((ids, *dist), before, strict=True):
                    assert torch.equal(got[b], old[b])

    monkeypatch.setattr(DeviceNgram, "lookup_into", spy)
    cfg = {"method": "eagle", "draft_model": str(eagle_head), "num_steps": 3, "adaptive": False, "ngram_assist": 1}
    llm = LLM(str(target), device="cpu", progress=False, graph_emulate=True, cuda_graph_bs=[1, 2, 4],
              max_running_requests=4, speculative_config=cfg)
    base = SamplingParams(temperature=0.8, top_k=6, max_tokens=8, ignore_eos=True)
    params = [dataclasses.replace(base, seed=i) for i in range(4)]
    ps = [list(range(240))] * 4
    first = [o.outputs[0].token_ids for o in llm.generate(ps, params)]
    assert seen, "no sampled iteration took the lookup's drafts"
    assert [o.outputs[0].token_ids for o in llm.generate(ps, params)] == first


def test_fused_lossless_with_an_eagle3_head_reading_four_target_layers(tiny_checkpoint, tmp_path) -> None:  # noqa: ANN001
    """``train-draft --aux-layers`` may name more than EAGLE-3's three layers: a head whose fc reads
    four (the last one included) serves in the fused iteration with exact greedy outputs, its
    features captured from those layers."""
    from updraft.testing import write_eagle3_head

    deep = tiny_checkpoint("llama", num_hidden_layers=4)
    head = write_eagle3_head(tmp_path / "h4", seed=5, aux_layers=(0, 1, 2, 3))
    ps = prompts(4, seed=41)
    plain = [o.outputs[0].token_ids for o in LLM(str(deep), device="cpu", progress=False).generate(ps, GREEDY)]
    llm = fused_llm(deep, head, "eagle3", adaptive=False)
    assert llm.engine.model.aux_layers == (0, 1, 2, 3)
    assert [o.outputs[0].token_ids for o in llm.generate(ps, GREEDY)] == plain
    eng = llm.engine
    assert eng.driver.fused.graphs and eng.spec_stats.num_draft_tokens == 3 * eng.spec_stats.num_drafts > 0
